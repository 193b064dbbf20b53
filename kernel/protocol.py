"""Names of our Jupyter protocol extensions, shared by the kernel and the agent client.

This module is data only: the client may import it without importing any of
the kernel's machinery.  Every field is documented in docs/protocol.md.
"""

# Version of the extension protocol, advertised in kernel_info_reply and the kernelspec.
PROTOCOL_VERSION = "1.0"

# Key in kernel_info_reply content, kernelspec metadata and execute_reply metadata.
KEY = "cancelkernel"

# Added to kernel_info_reply["supported_features"] so clients can detect us.
FEATURE = "cancelkernel"

# Control-channel request answered with "cancel_status_reply".
CANCEL_STATUS_REQUEST = "cancel_status_request"
CANCEL_STATUS_REPLY = "cancel_status_reply"

# MIME type of the events published on iopub as display_data.
EVENT_MIME = "application/vnd.cancelkernel.event+json"

# Execution states reported by cancel_status_reply.
STATE_IDLE = "idle"
STATE_RUNNING = "running"
STATE_CANCELLING = "cancelling"
STATE_UNRESPONSIVE = "unresponsive-to-interrupt"

# Shell-channel request answered with "checkpoint_reply" (save/restore/list/drop saved state).
CHECKPOINT_REQUEST = "checkpoint_request"
CHECKPOINT_REPLY = "checkpoint_reply"

# Names of the features advertised in kernel_info_reply content[KEY]["features"].
FEATURES = ("targeted_interrupt", "cancel_status", "reply_metadata", "budgets", "deadlines", "events", "dump_file", "checkpoint")

"""`CancelkernelEngine`: papermill's engine API on the agent client.

    papermill in.ipynb out.ipynb -k cancelkernel --engine cancelkernel --execution-timeout 600
    papermill.execute_notebook("in.ipynb", "out.ipynb", engine_name="cancelkernel", checkpoint="before-risky")

Papermill builds the NotebookExecutionManager (parameters already injected,
the working directory already changed) and calls `execute_managed_notebook`;
the cells run through the agent's notebook runner, the same one as
`cancelkernel run`, with papermill's hooks (cells.py).  Options come from
papermill's keyword arguments, then from the notebook's own
`metadata.cancelkernel` (policy only: budgets, grace, checkpoints).
"""

from __future__ import annotations

import typing as t

from papermill.engines import Engine
from papermill.log import logger

from ..agent.errors import BadInputError
from ..agent.notebook import run_notebook
from ..protocol import KEY
from .cells import ErrorRules, OutputEcho, PapermillHooks

# AgentKernel options a caller of papermill.execute_notebook may pass as engine keyword arguments.
AGENT_OPTIONS = (
    "wall_budget", "quiet_budget", "memory_budget", "interrupt_grace", "checkpoint", "log", "log_all", "history",
    "auto_floor", "auto_factor", "auto_default", "risky_after", "kernel_budgets", "accept_abandoned_threads",
    "max_output_bytes", "extra_arguments", "env", "connection_file", "server_url", "token", "kernel_id",
    "owner_restart_wait", "spare",
)  # fmt: skip
# What a notebook may say about itself in metadata.cancelkernel: the policy only (where it runs is the caller's to say).
NOTEBOOK_OPTIONS = ("wall_budget", "quiet_budget", "memory_budget", "interrupt_grace", "checkpoint")
# nbclient's error options, honoured as nbclient does.
RULE_OPTIONS = ("allow_errors", "allow_error_names", "force_raise_errors")
# Passed by papermill to every engine; nothing to do with them here.
PAPERMILL_ARGS = ("input_path",)


class CancelkernelEngine(Engine):
    """Run a papermill notebook under the agent policy: budgets, one interrupt, restart with state,
    a report per cell."""

    @classmethod
    def execute_managed_notebook(
        cls,
        nb_man: t.Any,
        kernel_name: str,
        log_output: bool = False,
        stdout_file: t.Any = None,
        stderr_file: t.Any = None,
        start_timeout: float = 60,
        execution_timeout: float | None = None,
        **kwargs: t.Any,
    ) -> t.Any:
        """Execute nb_man.nb's cells in order on one kernel; outputs, reports and papermill's metadata go into it."""
        from ..agent.client import AgentKernel

        options, rules, skip_tag = engine_options(nb_man.nb, execution_timeout=execution_timeout, **kwargs)
        echo = OutputEcho(logger, log_output=log_output, stdout_file=stdout_file, stderr_file=stderr_file)
        hooks = PapermillHooks(nb_man, rules=rules, echo=echo, logger=logger, skip_tag=skip_tag)
        with AgentKernel(kernel_name, start_timeout=start_timeout, **options) as ak:
            logger.info(f"Executing notebook with kernel: {kernel_name} ({_what_it_gets(ak)})")
            language_info = ak.info.raw.get("language_info")
            if isinstance(language_info, dict):
                nb_man.nb.metadata["language_info"] = language_info
            run_notebook(nb_man.nb, ak, hooks=hooks)
        return nb_man.nb


def engine_options(
    nb: t.Any, *, execution_timeout: float | None = None, **kwargs: t.Any
) -> tuple[dict[str, t.Any], ErrorRules, str]:
    """(AgentKernel options, error rules, the skip tag) from papermill's keyword arguments and the notebook's metadata.

    Raises BadInputError, before any kernel starts, for a notebook option it does not know or a clash.
    """
    options = notebook_options(nb)
    # nbclient's name, as papermill's engine reads it
    timeout = execution_timeout if execution_timeout else kwargs.pop("timeout", None)
    kwargs.pop("timeout", None)
    if timeout and kwargs.get("wall_budget") is not None:
        raise BadInputError(
            f"execution_timeout={timeout!r} and wall_budget={kwargs['wall_budget']!r} both set the wall budget of "
            "every cell; give one"
        )
    if timeout:
        options["wall_budget"] = timeout
    options.update({k: kwargs.pop(k) for k in AGENT_OPTIONS if k in kwargs})
    rules = ErrorRules(**{k: kwargs.pop(k) for k in RULE_OPTIONS if k in kwargs})
    skip_tag = str(kwargs.pop("skip_cells_with_tag", "skip-execution"))
    ignored = sorted(k for k in kwargs if k not in PAPERMILL_ARGS)
    if ignored:
        logger.warning(f"cancelkernel engine: ignoring options it does not use: {', '.join(ignored)}")
    return options, rules, skip_tag


def notebook_options(nb: t.Any) -> dict[str, t.Any]:
    """The policy a notebook asks for in its metadata.cancelkernel
    (e.g. {"checkpoint": "before-risky", "quiet_budget": "2m"})."""
    said = (nb.get("metadata") or {}).get(KEY)
    if said is None:
        return {}
    if not isinstance(said, dict):
        raise BadInputError(
            f'notebook metadata.{KEY} must be an object such as {{"checkpoint": "before-risky"}}, not {said!r}'
        )
    unknown = sorted(set(said) - set(NOTEBOOK_OPTIONS))
    if unknown:
        raise BadInputError(
            f"notebook metadata.{KEY} has {', '.join(map(repr, unknown))}; it may set {', '.join(NOTEBOOK_OPTIONS)}"
        )
    return {k: v for k, v in said.items() if v is not None}


def _what_it_gets(ak: t.Any) -> str:
    if ak.info.ours:
        return "cancelkernel engine: budgets, targeted interrupts, checkpoints"
    return (
        "cancelkernel engine, degraded on a stock kernel: budgets watched by the client, "
        "interrupts by the kernelspec's means, no checkpoints"
    )

"""An A2A message handed to its use case (``adapters.services.task_messages``): what the
message says, its files, and the answer to a refusal.

The use case decides where the message goes (a new task, or the open task it names or its
context owes) and what it starts (a delivery into the task's listening run, or a new run). The
message's files (``adapters.http.a2a.message_files``) are saved here, once its task is known
and before the run is told of them: one line per file in the message's text, and for a new run
``FOLDLINE_A2A_FILES`` naming their manifest. A refusal is answered from the one table
(``errors.RPC_ERRORS``) at the step it came from.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from adapters.http.a2a import message_files
from adapters.http.a2a.message_files import LoadedFile
from adapters.http.errors import INTERNAL, RpcError, as_rpc
from adapters.http.inbound import MessageIn
from adapters.http.ports import ServerRuntime
from adapters.services.task_messages import Message, MessageRefused
from engine.domain.push import PushConfig


@dataclass
class _Files:
    """The message's files, saved at most once per task it is planned into."""

    runtime: ServerRuntime
    message_id: str
    loaded: Sequence[LoadedFile]
    saved: dict[str, message_files.Saved] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        return bool(self.loaded)

    def told(self, text: str, task_id: str) -> tuple[str, dict[str, str]]:
        """The message's text with a line per file, and the run's environment naming the
        manifest (both unchanged without files).

        Raises:
            RpcError: -32603, the files could not be saved (nothing is started).
        """
        if not self.loaded:
            return text, {}
        if task_id not in self.saved:
            self.saved[task_id] = self._save(task_id)
        saved = self.saved[task_id]
        return message_files.prompt(text, saved), {message_files.ENV: str(saved.manifest)}

    def _save(self, task_id: str) -> message_files.Saved:
        config, sandbox = self.runtime.config, self.runtime.jobs.sandbox
        workspace = config.workspace
        owner = None
        if sandbox is not None and os.geteuid() == 0:  # the workspace is the run user's
            owner = (sandbox.user.uid, sandbox.user.gid)
        try:
            if config.db_url is None and config.db.parent.is_relative_to(
                workspace / message_files.ROOT
            ):  # the log's private directory: never written into for a caller
                raise OSError(f"the log's directory {config.db.parent} is in {message_files.ROOT}")
            return message_files.save(workspace, task_id, self.message_id, self.loaded, owner)
        except OSError as ex:
            raise RpcError(INTERNAL, f"the message's files could not be saved: {ex}") from None


def accept(
    runtime: ServerRuntime,
    message: MessageIn,
    text: str,
    files: Sequence[LoadedFile] = (),
    push: PushConfig | None = None,
) -> str:
    """Record the message's work and start its run; a known messageId answers its task again
    (and saves no files). Returns the task id."""
    said = Message(
        message_id=message.message_id,
        context_id=message.context_id,
        task_id=message.task_id,
        text=text,
        agent=message.agent,
        interrupt=message.interrupt,
        push=push,
    )
    try:
        return runtime.messages.accept(said, _Files(runtime, message.message_id, files))
    except MessageRefused as refused:  # at the step it names: the one table's answer
        raise as_rpc(refused.error, refused.step) from None

"""The message and part model shared by every layer.

The model itself is defined once, in the standalone client's wire package (`om_client.messages`, pure
pydantic: see its docstring for what a part and a message are), so the server, the core and every Python
client read and write one shape. This module is where the core imports it from.
"""

from __future__ import annotations

from om_client.messages import ATTACHMENT_KINDS as ATTACHMENT_KINDS
from om_client.messages import NON_CONTENT_PREFIXES as NON_CONTENT_PREFIXES
from om_client.messages import SPEAKER_KEY as SPEAKER_KEY
from om_client.messages import TEXT_KINDS as TEXT_KINDS
from om_client.messages import TOOL_KIND as TOOL_KIND
from om_client.messages import Message as Message
from om_client.messages import Part as Part
from om_client.messages import Role as Role
from om_client.messages import ToolState as ToolState
from om_client.messages import ensure_utc as ensure_utc
from om_client.messages import speaker_name_problem as speaker_name_problem
from om_client.messages import text_message as text_message

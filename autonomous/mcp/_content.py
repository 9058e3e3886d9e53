"""An MCP tool result as the text the model reads: text joined, other content described."""

from __future__ import annotations

import json

import mcp_types as types


class MCPToolError(Exception):
    """An MCP tool answered with an error result (``isError``); the message is its text.

    Raised inside the tool call, so the model reads it as the tool's error, like any tool's.
    """


def result_text(result: types.CallToolResult) -> str:
    """The text of ``result``: text blocks as they are, other blocks described in brackets,
    one block a line; the structured content as JSON when there is no block at all.

    Raises:
        MCPToolError: ``result`` is an error result.
    """
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if result.is_error:
        raise MCPToolError(text or "the tool failed and said nothing more")
    return text


def _block_text(block: types.ContentBlock) -> str:
    """One content block as text."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.uri} ({block.name})]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[resource {resource.uri}: {resource.mime_type or 'binary'}, not shown]"
    return f"[{getattr(block, 'type', 'unknown')} content, not shown]"

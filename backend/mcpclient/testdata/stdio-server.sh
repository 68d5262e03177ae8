#!/bin/sh
# A tiny MCP server over stdio in POSIX sh, for tests: tools "whoami" (who and where it runs,
# and its pid), "die" (the process exits without answering) and "peek" (the first bytes of
# the file $MCP_TEST_FILE in hex, or "refused: " and the error when it cannot be read).
while IFS= read -r line; do
	id=$(printf '%s\n' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
	case "$line" in
	*'"method":"initialize"'*)
		printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":false}},"serverInfo":{"name":"sh-test","version":"1"}}}\n' "$id" ;;
	*'"method":"tools/list"'*)
		printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"whoami","description":"Who and where.","inputSchema":{"type":"object","properties":{}}},{"name":"die","description":"Exit.","inputSchema":{"type":"object","properties":{}}},{"name":"peek","description":"Read MCP_TEST_FILE.","inputSchema":{"type":"object","properties":{}}}]}}\n' "$id" ;;
	*'"method":"tools/call"'*'"name":"die"'*)
		exit 3 ;;
	*'"method":"tools/call"'*'"name":"peek"'*)
		v=$(head -c 16 "${MCP_TEST_FILE:-/nonexistent}" 2>/dev/null | od -An -tx1 | tr -d ' \n')
		if [ -n "$v" ]; then v="read=$v"; else v="refused: $(head -c 1 "${MCP_TEST_FILE:-/nonexistent}" 2>&1 >/dev/null | head -n 1 | tr -d '"\\\\')"; fi
		printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}\n' "$id" "$v" ;;
	*'"method":"tools/call"'*'"name":"whoami"'*)
		printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"user=%s pid=%s secret=%s"}]}}\n' "$id" "$(id -un)" "$$" "${MCP_TEST_SECRET:-none}" ;;
	*'"method":"ping"'*)
		printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
	*'"id":'*)
		printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}\n' "$id" ;;
	esac
done

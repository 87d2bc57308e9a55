"""What `python -m` runs for every vLLM server the launcher plans (importing nothing: the launcher's reaper and the
server factory name it too): vLLM's OpenAI-compatible server, `vllm serve`'s own; the older
`vllm.entrypoints.openai.api_server` runs the same server and is deprecated."""

SERVER_MODULE = "vllm.entrypoints.launchers.api_server.entry"

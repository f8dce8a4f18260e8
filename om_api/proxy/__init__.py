"""The OpenAI-compatible proxy: `POST /v1/chat/completions` with memory, for a chat backend that already
speaks OpenAI.

`chat_completions` is the endpoint (one turn per request, the actor's call and its tool loop); `params`
the allow-list of request fields forwarded to the actor's model; `tools` the tools the proxy answers
itself (`recall`, `updateWorkingMemory`); `actor_usage` what each call cost, per tenant and per key. The
message conversion it shares with `/turns` is `om_api.openai_format`.
"""

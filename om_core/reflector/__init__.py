"""The Reflector: the model call that rewrites the whole observation log into a shorter one.

`prompt` holds its prompts, the compression ladder its retries climb, the parsing of its output, and the
text arithmetic of committing a reflection over a log that grew meanwhile. The call itself is the
engine's (`om_core.engine.reflector_call`). Import the module directly; the package re-exports nothing.
"""

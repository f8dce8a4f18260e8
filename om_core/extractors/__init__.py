"""Extractors (behaviour §8): values OM derives during observation and reflection, next to the log.

`definition` holds the `Extractor` value and its rules, `registry` the Python extractors plugins register,
`compose` the list one run uses, `inline` the values a model writes inside its Observer/Reflector output,
`structured` the follow-up structured-output call, and `persist` how values are checked, handed to
`on_extracted` and written into the thread's OM metadata.
"""

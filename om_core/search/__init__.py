"""Search over what a resource remembers: observation groups and raw messages, lexical and semantic."""

"""The sample conversation generator lives in the package (the demo ships it); tests import it from here."""

from om_app.sample_conversation import CORRECTIONS, PLANTED, Conversation, generate

__all__ = ["CORRECTIONS", "PLANTED", "Conversation", "generate"]

"""The controller-agent protocol: its .proto schema, the code generated from it, and what
turns our domain types into its messages and back (``codec``) and carries them (``channel``)."""

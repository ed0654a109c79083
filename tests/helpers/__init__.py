"""What the tests share (no tests here): `audit` (hand-made messages, a fake observer, a
scripted transcript format, `quiet`), `cli` (`invoke`), `store` (a stored thread read back),
`live` (the CLI in a subprocess, transcript files that grow), `wire` and `batch` (local HTTP
stand-ins for the observer APIs), `reports` (a format with billed tokens, two-faced
observers), `secrets` (planted credentials) and `third_party` (an installed example plugin).
"""

"""A stand-in for a command-line model tool: reads the prompt on stdin, prints an answer.

FAKE_MODEL_MODE picks the answer: `fenced` (prose around a ```json block, the default), `bare`
(the object alone), `prose` (no JSON at all), `fail` (exit status 3 with a message on stderr),
`slow` (sleeps 5 s). The answer asks for a correction when the prompt contains "all tests pass".
The prompt is copied to FAKE_MODEL_LOG when that is set.
"""

import json
import os
import sys
import time

prompt = sys.stdin.read()
if os.environ.get("FAKE_MODEL_LOG"):
    with open(os.environ["FAKE_MODEL_LOG"], "a") as fh:
        fh.write(json.dumps({"argv": sys.argv[1:], "prompt": prompt}) + "\n")
mode = os.environ.get("FAKE_MODEL_MODE", "fenced")
needs = "all tests pass" in prompt
answer = {
    "needsCorrection": needs,
    "message": "the tests still fail, look again" if needs else None,
}
if mode == "fail":
    print("model not found: try `ollama pull`", file=sys.stderr)
    sys.exit(3)
if mode == "slow":
    time.sleep(5)
if mode == "prose":
    print("I think the agent did fine.")
elif mode == "bare":
    print(json.dumps(answer))
else:
    print(
        'Here is my verdict on {"the": "transcript"}:\n```json\n'
        + json.dumps(answer)
        + "\n```\nHope that helps."
    )

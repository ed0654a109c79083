"""Fake credentials in the formats real transcripts leak them in, and a transcript carrying them.

Each `Planted` is one format: the text an agent or a person would have written, the secret
values in it (none may leave the machine) and an anchor, a piece of the surrounding text that
must survive redaction (so a test knows the line reached the output and was not just cut).
The values are made up; the AWS pair mirrors the shape of AWS's documentation example.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Planted:
    name: str
    text: str
    secrets: tuple[str, ...]
    anchor: str


HEX64 = "9c4e1f7a2b8d3e6f0a5c9b2d7e4f1a8c3b6d9e2f5a8c1b4d7e0f3a6c9b2d5e8f"
RSA_BODY = (
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL\n"
    "7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg\n"
    "0nLVkjRo9z+40RQzuVaE8AkAFmxZzow3x+VJYKdjykkJ0iT9wCS0DRTXu269V264Vf/3jvredZiKRkgwlL9xNAwxXFg0"
)
OPENSSH_BODY = (
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDx2K3Vn8Hq7r1m0ZcYbq9kz6x8Qh7yH1e4bV9m2Ww1AAAAJgZ3n8rGd5"
)
GCP_KEY_BODY = (
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu"
)
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiI0MiIsInJvbGUiOiJhZG1pbiIsImV4cCI6MTc5OTk5OTk5OX0"
    ".Qm9vZ2llV29vZ2llVGhpc0lzTm90QVJlYWxTaWduYXR1cmU"
)

PLANTED: list[Planted] = [
    # -- cloud keys ---------------------------------------------------------------------------
    Planted(
        "aws-access-key-id",
        "aws configure set aws_access_key_id AKIAQ3EGRXBM7NVT5WPY",
        ("AKIAQ3EGRXBM7NVT5WPY",),
        "aws configure set aws_access_key_id",
    ),
    Planted(
        "aws-secret-access-key",
        "[default]\naws_secret_access_key = Jr8nQ2vX/5tLk0mZ9pWc3bHy7sFd1gRa4eUiO6qT",
        ("Jr8nQ2vX/5tLk0mZ9pWc3bHy7sFd1gRa4eUiO6qT",),
        "aws_secret_access_key =",
    ),
    Planted(
        "gcp-service-account-key",
        '{"type": "service_account", "project_id": "acme-prod", "private_key": '
        f'"-----BEGIN PRIVATE KEY-----\\n{GCP_KEY_BODY}\\n-----END PRIVATE KEY-----\\n", '
        '"client_email": "deploy@acme-prod.iam.gserviceaccount.com"}',
        ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj", "MzEfYyjiWA4R4"),
        '"client_email": "deploy@acme-prod.iam.gserviceaccount.com"',
    ),
    Planted(
        "google-api-key",
        "const maps = new Loader({ apiKey: 'AIzaSyB7k2Qm9LxP4vTn8RbW3cHs6JfG1yKu5Za' })",
        ("AIzaSyB7k2Qm9LxP4vTn8RbW3cHs6JfG1yKu5Za",),
        "const maps = new Loader(",
    ),
    Planted(
        "gcp-oauth-access-token",
        "gcloud auth print-access-token\n"
        "ya29.a0AfB_byC3kQm8ZtR2vLx9PnW4cHs7JdG1yKu5ZaTq0Ee6Rr3Uu8Ii2Oo",
        ("ya29.a0AfB_byC3kQm8ZtR2vLx9PnW4cHs7JdG1yKu5ZaTq0Ee6Rr3Uu8Ii2Oo",),
        "gcloud auth print-access-token",
    ),
    Planted(
        "azure-storage-connection-string",
        "AZURE_STORAGE=DefaultEndpointsProtocol=https;AccountName=acmestore;"
        "AccountKey=q7Zt3Lx9Pm2Vn8Rb4Wc6Hs1Jf5Gy0Ku3Ea7Tq9Ii2Oo4Uu6Rr8Ee1Ww3Yy5Aa7Cc9Dd0Ff2Gg4Hh6Jj8Kk1Ll3Mm5Nn7==;"
        "EndpointSuffix=core.windows.net",
        (
            "q7Zt3Lx9Pm2Vn8Rb4Wc6Hs1Jf5Gy0Ku3Ea7Tq9Ii2Oo4Uu6Rr8Ee1Ww3Yy5Aa7Cc9Dd0Ff2Gg4Hh6Jj8Kk1Ll3Mm5Nn7",
        ),
        "AccountName=acmestore;",
    ),
    Planted(
        "azure-sas-signature",
        "https://acmestore.blob.core.windows.net/backups/db.gz?sv=2022-11-02&ss=b&srt=o&sp=r"
        "&se=2026-12-01T00:00:00Z&sig=Zx8Qm2Lk7Vn4Rb9Wc1Hs6Jf3Gy0Ku5Ea8Tq2Ii7Oo%3D",
        ("Zx8Qm2Lk7Vn4Rb9Wc1Hs6Jf3Gy0Ku5Ea8Tq2Ii7Oo",),
        "https://acmestore.blob.core.windows.net/backups/db.gz?sv=2022-11-02",
    ),
    # -- tokens with a known prefix -----------------------------------------------------------
    Planted(
        "github-classic-token",
        "git push https://ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3s0nly@github.com/acme/app.git",
        ("ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3s0nly",),
        "@github.com/acme/app.git",
    ),
    Planted(
        "github-fine-grained-token",
        "export GH_TOKEN=github_pat_11AB2CD3E0Fg4Hi5Jk6Lm7_No8Pq9Rs0Tu1Vw2Xy3Za4Bc5De6Fg7Hi8Jk9Lm0No1Pq2Rs3Tu4",
        ("github_pat_11AB2CD3E0Fg4Hi5Jk6Lm7_No8Pq9Rs0Tu1Vw2Xy3Za4Bc5De6Fg7Hi8Jk9Lm0No1Pq2Rs3Tu4",),
        "export GH_TOKEN=",
    ),
    Planted(
        "gitlab-token",
        "curl --header 'PRIVATE-TOKEN: glpat-Zq8Xw2Lm4Np6Rt9Vb1Kc3' https://gitlab.example.com/api/v4/projects",
        ("glpat-Zq8Xw2Lm4Np6Rt9Vb1Kc3",),
        "https://gitlab.example.com/api/v4/projects",
    ),
    Planted(
        "openai-key",
        "client = OpenAI(api_key='sk-proj-Xq3vT9bL2mK8pR4wZ7yN1cF6hJ0dS5aE-gU_iO2lP9')",
        ("sk-proj-Xq3vT9bL2mK8pR4wZ7yN1cF6hJ0dS5aE-gU_iO2lP9",),
        "client = OpenAI(",
    ),
    Planted(
        "anthropic-key",
        "ANTHROPIC_API_KEY=sk-ant-api03-kP7qW2eR9tY4uI1oL6aS3dF8gH5jK0zXcVbNm-Q_wErTyAA",
        ("sk-ant-api03-kP7qW2eR9tY4uI1oL6aS3dF8gH5jK0zXcVbNm-Q_wErTyAA",),
        "ANTHROPIC_API_KEY=",
    ),
    Planted(
        "slack-bot-token",
        "app = App(token='xoxb-2048163845-4096327691-Q7wE9rT2yU4iO6pA8sD0fG1h')",
        ("xoxb-2048163845-4096327691-Q7wE9rT2yU4iO6pA8sD0fG1h",),
        "app = App(",
    ),
    Planted(
        "slack-webhook-url",
        'curl -X POST -d \'{"text": "deployed"}\' '
        "https://hooks.slack.com/services/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",
        ("Xk3hR9vLq2WnT7yPz4BcJd8e",),
        "https://hooks.slack.com/services/",
    ),
    Planted(
        "stripe-live-key",
        "stripe.api_key = 'sk_live_51Hq8Zt2Lx9Pm4Vn7Rb3Wc6Hs1Jf'",
        ("sk_live_51Hq8Zt2Lx9Pm4Vn7Rb3Wc6Hs1Jf",),
        "stripe.api_key =",
    ),
    Planted(
        "huggingface-token",
        "huggingface-cli login --token hf_Qm8Zt2Lx9Pm4Vn7Rb3Wc6Hs1Jf5Gy0KuEa",
        ("hf_Qm8Zt2Lx9Pm4Vn7Rb3Wc6Hs1Jf5Gy0KuEa",),
        "huggingface-cli login --token",
    ),
    Planted(
        "npm-token",
        "//registry.npmjs.org/:_authToken=npm_Zq8Xw2Lm4Np6Rt9Vb1Kc3Hs5Jf7Gy0KuEa2T",
        ("npm_Zq8Xw2Lm4Np6Rt9Vb1Kc3Hs5Jf7Gy0KuEa2T",),
        "//registry.npmjs.org/:_authToken=",
    ),
    Planted(
        "sendgrid-key",
        "sg = SendGridAPIClient('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')",
        ("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",),
        "sg = SendGridAPIClient(",
    ),
    Planted(
        "pypi-token",
        "twine upload -u __token__ -p pypi-AgEIcHlwaS5vcmcCJGE4ZjBkNDk2LTJkYjQtNDc0Yi1hNDk2",
        ("pypi-AgEIcHlwaS5vcmcCJGE4ZjBkNDk2LTJkYjQtNDc0Yi1hNDk2",),
        "twine upload -u __token__ -p",
    ),
    # -- keys and tokens by their shape -------------------------------------------------------
    Planted(
        "jwt",
        f"Set-Auth: {JWT}",
        (JWT.split(".")[1], JWT.split(".")[2]),
        "Set-Auth:",
    ),
    Planted(
        "rsa-private-key",
        f"-----BEGIN RSA PRIVATE KEY-----\n{RSA_BODY}\n-----END RSA PRIVATE KEY-----",
        tuple(RSA_BODY.split("\n")),
        "",
    ),
    Planted(
        "openssh-private-key",
        f"cat ~/.ssh/id_ed25519\n-----BEGIN OPENSSH PRIVATE KEY-----\n{OPENSSH_BODY}\n"
        "-----END OPENSSH PRIVATE KEY-----",
        tuple(OPENSSH_BODY.split("\n")),
        "cat ~/.ssh/id_ed25519",
    ),
    # -- passwords ----------------------------------------------------------------------------
    Planted(
        "url-password",
        "DATABASE_URL=postgres://app:Vq7-Lp2xWm9z@db.internal:5432/prod",
        ("Vq7-Lp2xWm9z",),
        "@db.internal:5432/prod",
    ),
    Planted(
        "redis-url-without-user",
        "celery -b redis://:Hx4kPz8QwR2m@cache.internal:6379/0 worker",
        ("Hx4kPz8QwR2m",),
        "@cache.internal:6379/0 worker",
    ),
    Planted(
        "mysql-dash-p",
        "mysql -uroot -pTr7bQx2Lm9Zk -h 127.0.0.1 shop < dump.sql",
        ("Tr7bQx2Lm9Zk",),
        "-h 127.0.0.1 shop < dump.sql",
    ),
    Planted(
        "curl-user-password",
        "curl -u admin:Wq8mZt3LxP https://ci.internal/api/json",
        ("Wq8mZt3LxP",),
        "https://ci.internal/api/json",
    ),
    Planted(
        "env-assignment",
        "DB_HOST=localhost\nDB_PASSWORD=correct-horse-battery-staple\nDB_PORT=5432",
        ("correct-horse-battery-staple",),
        "DB_PORT=5432",
    ),
    Planted(
        "json-password",
        '{"username": "ada", "password": "Pq9!vLx2#Wm"}',
        ("Pq9!vLx2#Wm",),
        '{"username": "ada", "password": "',
    ),
    Planted(
        "password-in-prose",
        "The staging admin login is ada and my password is Tangerine!Falcon42 so use that.",
        ("Tangerine!Falcon42",),
        "The staging admin login is ada and my password is",
    ),
    # -- HTTP ---------------------------------------------------------------------------------
    Planted(
        "hex-value-in-http-header",
        f'curl -H "X-Auth: {HEX64}" https://api.internal/v1/orders',
        (HEX64,),
        "https://api.internal/v1/orders",
    ),
    Planted(
        "session-cookie-in-json",
        '{"cookies": {"session": "dXNlcl9pZD00MjtleHA9MTc5OTk5OTk5OTtzaWc9OWYzYTFiMmMzZA=="}, "path": "/"}',
        ("dXNlcl9pZD00MjtleHA9MTc5OTk5OTk5OTtzaWc9OWYzYTFiMmMzZA",),
        '"path": "/"',
    ),
    Planted(
        "cookie-header",
        "Cookie: sessionid=k3q9zt7wmx2lp8vn4rb6hs1jf5gy0kue; theme=dark",
        ("k3q9zt7wmx2lp8vn4rb6hs1jf5gy0kue",),
        "Cookie: sessionid=",
    ),
    Planted(
        "bearer-token",
        "Authorization: Bearer 7f1c2a9e4b8d4e0f9a6c3b5d2e1f0a9b",
        ("7f1c2a9e4b8d4e0f9a6c3b5d2e1f0a9b",),
        "Authorization: Bearer",
    ),
    Planted(
        "basic-auth",
        "Authorization: Basic YWRhOlRhbmdlcmluZSFGYWxjb240Mg==",
        ("YWRhOlRhbmdlcmluZSFGYWxjb240Mg",),
        "Authorization: Basic",
    ),
    # -- high-entropy values next to secret-like names ----------------------------------------
    Planted(
        "entropy-next-to-key-name",
        "DATADOG_APP_KEY=4f9c1e7a2b8d3e6f0a5c9b2d7e4f1a8c3b6d9e2f",
        ("4f9c1e7a2b8d3e6f0a5c9b2d7e4f1a8c3b6d9e2f",),
        "DATADOG_APP_KEY=",
    ),
    Planted(
        "entropy-next-to-credential-name",
        'config = {"clientSecret": "Lm4Np6Rt9Vb1Kc3Hs5Jf7Gy0", "credentials": "Zq8Xw2Lm4Np6Rt9Vb1Kc3Hs5Jf"}',
        ("Lm4Np6Rt9Vb1Kc3Hs5Jf7Gy0", "Zq8Xw2Lm4Np6Rt9Vb1Kc3Hs5Jf"),
        "config = {",
    ),
    # -- forms of the round-three review: a prefix not known before, a secret inside base64, a
    # token cut by a line break, a JWT whose JSON has spaces and whose signature is standard
    # base64 ----------------------------------------------------------------------------------
    Planted(
        "twilio-api-key",
        "client = Client('SK3f9c1a7e5b2d8046c9e1f3a7b5d20e84', api_secret, account_sid)",
        ("SK3f9c1a7e5b2d8046c9e1f3a7b5d20e84",),
        "client = Client(",
    ),
    Planted(
        "base64-encoded-env",
        "echo REJfSE9TVD1kYi5pbnRlcm5hbApEQl9VU0VSPWFwcApEQl9QQVNTV09SRD1WcThtUjJ4THA5d1Q0ektlCg=="
        " | base64 -d > .env",
        ("REJfSE9TVD1kYi5pbnRlcm5hbApEQl9VU0VSPWFwcApEQl9QQVNTV09SRD1WcThtUjJ4THA5d1Q0ektlCg==",),
        "| base64 -d > .env",
    ),
    Planted(
        "github-token-split-by-a-line-break",
        "The token printed was ghp_7Hk2Lm9Qz4XcVbN1aS\n    8dF3gJ6kP0oI5uYt2R (wrapped by the terminal)",
        ("ghp_7Hk2Lm9Qz4XcVbN1aS", "8dF3gJ6kP0oI5uYt2R"),
        "The token printed was",
    ),
    Planted(
        "jwt-spaced-json-standard-signature",
        'claims = verify("ewogICJhbGciOiAiSFMyNTYiLAogICJ0eXAiOiAiSldUIgp9'
        ".ewogICJzdWIiOiAiNDIiLAogICJyb2xlIjogImFkbWluIgp9"
        '.dGhpc+is/a2Vy/c2lnbmF0dXJlX3dpdGhfcGx1c2VzPT0=")',
        (
            "ewogICJzdWIiOiAiNDIiLAogICJyb2xlIjogImFkbWluIgp9",
            "dGhpc+is/a2Vy/c2lnbmF0dXJlX3dpdGhfcGx1c2VzPT0=",
        ),
        "claims = verify(",
    ),
]

# Terminal control sequences a transcript can carry: set the window title, clear the screen,
# move the cursor home, ring the bell, and a hyperlink (OSC 8).
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[31mred\x1b[0m\x07\x1b]8;;http://evil.test\x1b\\link\x1b]8;;\x1b\\"


def all_secrets() -> list[str]:
    return [s for p in PLANTED for s in p.secrets]


def write_claude_code_session(path: Path, cwd: str = "/home/dev/shop") -> str:
    """Write a Claude Code session whose last turn carries every planted format; return its id.

    The formats are spread over the places text comes from: what the person typed, the agent's
    text, Bash commands and their output, a file the agent read and one it wrote.
    """
    session = "5ec2e75a-0000-4000-8000-00000000a11d"
    lines: list[dict] = []
    n = 0

    def add(kind: str, message: dict, **extra) -> None:
        nonlocal n
        n += 1
        lines.append(
            {
                "parentUuid": lines[-1]["uuid"] if lines else None,
                "isSidechain": False,
                "userType": "external",
                "cwd": cwd,
                "sessionId": session,
                "version": "2.1.97",
                "type": kind,
                "uuid": f"5ec2e75a-0000-4000-8000-{n:012d}",
                "timestamp": f"2026-11-02T09:{n // 60:02d}:{n % 60:02d}Z",
                "message": message,
                **extra,
            }
        )

    def say(text: str) -> None:
        add(
            "assistant",
            {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": [{"type": "text", "text": text}],
                "usage": {"input_tokens": 10, "output_tokens": 10},
            },
        )

    def call(name: str, tool_input: dict, output: str) -> None:
        tool_id = f"toolu_{n:04d}"
        add(
            "assistant",
            {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}],
                "usage": {"input_tokens": 10, "output_tokens": 10},
            },
        )
        add(
            "user",
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": output}],
            },
        )

    where = ["typed", "said", "command", "output", "read", "write"]
    spread: dict[str, list[Planted]] = {w: [] for w in where}
    for i, p in enumerate(PLANTED):
        spread[where[i % len(where)]].append(p)
    typed = "\n\n".join(p.text for p in spread["typed"])
    add("user", {"role": "user", "content": f"Deploy the shop to staging.\n\n{typed}"})
    say("Setting it up.\n\n" + "\n\n".join(p.text for p in spread["said"]))
    for p in spread["command"]:
        call("Bash", {"command": p.text, "description": "run it"}, "ok")
    call(
        "Bash",
        {"command": "./deploy.sh --verbose", "description": "deploy"},
        ESCAPES + "\n" + "\n".join(p.text for p in spread["output"]),
    )
    call(
        "Read",
        {"file_path": f"{cwd}/.env"},
        "\n".join(
            f"{i + 1}\t{line}"
            for i, line in enumerate("\n".join(p.text for p in spread["read"]).split("\n"))
        ),
    )
    call(
        "Write",
        {
            "file_path": f"{cwd}/config/secrets.txt",
            "content": "\n".join(p.text for p in spread["write"]),
        },
        "File created successfully",
    )
    say("Done: the shop is deployed to staging and all tests pass.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return session

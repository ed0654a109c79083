"""Secrets are replaced before text leaves the machine; ordinary code is left alone."""

from __future__ import annotations

import time

import pytest
from helpers.secrets import ESCAPES, PLANTED

from auditor.printable import printable
from auditor.redact import KINDS, redact

# Fake credentials in the real formats (the AWS pair is the one from AWS's own docs).
OPENAI = "sk-proj-Xq3vT9bL2mK8pR4wZ7yN1cF6hJ0dS5aE-gU_iO2lP9"
ANTHROPIC = "sk-ant-api03-kP7qW2eR9tY4uI1oL6aS3dF8gH5jK0zXcVbNm-Q_wErTy"
GOOGLE = "AIzaSyD4x9Qm2LkP7vTn3RbW8cHs1JfG6yKu0Ze"
GITHUB = "ghp_9f3Kd82LmQz7XcVbN1aS4dF6gH8jK0lP2oI5"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9"
    ".4pcPyMD09olPSyXnrXCjTwXyr4BsezdI1AVTmud2fU4"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"export OPENAI_API_KEY={OPENAI}", "export OPENAI_API_KEY=[REDACTED:openai-key]"),
        (
            f'client = Anthropic(api_key="{ANTHROPIC}")',
            'client = Anthropic(api_key="[REDACTED:anthropic-key]")',
        ),
        (f"GEMINI_API_KEY: {GOOGLE}", "GEMINI_API_KEY: [REDACTED:google-api-key]"),
        (
            f"git remote set-url origin https://{GITHUB}@github.com/acme/app.git",
            "git remote set-url origin https://[REDACTED:github-token]@github.com/acme/app.git",
        ),
        (
            "token: github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
            "token: [REDACTED:github-token]",
        ),
        (
            "SLACK_BOT_TOKEN=xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "SLACK_BOT_TOKEN=[REDACTED:slack-token]",
        ),
        (
            f'curl -H "Authorization: Bearer {JWT}" https://api.example.com/me',
            'curl -H "Authorization: Bearer [REDACTED:jwt]" https://api.example.com/me',
        ),
        (
            "Authorization: Bearer 7f1c2a9e4b8d4e0f9a6c3b5d2e1f0a9b",
            "Authorization: Bearer [REDACTED:bearer-token]",
        ),
        ("Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: Basic [REDACTED:basic-auth]"),
        (
            "DATABASE_URL=postgres://app:s3cr3t-Pa55@db.internal:5432/prod",
            "DATABASE_URL=postgres://app:[REDACTED:password]@db.internal:5432/prod",
        ),
        ("redis://default:Zx81kQ@cache:6379/0", "redis://default:[REDACTED:password]@cache:6379/0"),
    ],
)
def test_known_secret_formats_are_replaced(text, expected):
    assert redact(text) == expected


def test_aws_access_key_takes_its_adjacent_secret_with_it():
    csv = f"User name,Access key ID,Secret access key\ndeploy,{AWS_ID},{AWS_SECRET}\n"
    out = redact(csv)
    assert AWS_ID not in out and AWS_SECRET not in out
    assert "deploy,[REDACTED:aws-access-key-id],[REDACTED:aws-secret-key]" in out


def test_aws_credentials_file():
    text = f"[default]\naws_access_key_id = {AWS_ID}\naws_secret_access_key = {AWS_SECRET}\n"
    out = redact(text)
    assert AWS_ID not in out and AWS_SECRET not in out
    assert "aws_secret_access_key = [REDACTED:secret]" in out


def test_presigned_url_keeps_the_url_but_not_the_signature():
    url = (
        "https://figma-alpha-api.s3.us-west-2.amazonaws.com/images/3f1c?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={AWS_ID}%2F20260129%2Fus-west-2%2Fs3%2Faws4_request&X-Amz-Date=20260129T000000Z"
        "&X-Amz-Expires=604800&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
    )
    out = redact(url)
    assert AWS_ID not in out and "fe5f80f77d5f" not in out
    assert out.startswith("https://figma-alpha-api.s3.us-west-2.amazonaws.com/images/3f1c?")
    assert "X-Amz-Credential=[REDACTED:aws-credential]&X-Amz-Date=20260129T000000Z" in out
    assert out.endswith("&X-Amz-Signature=[REDACTED:aws-signature]")


def test_private_key_block_is_replaced_whole():
    text = (
        "Writing deploy key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "QyNTUxOQAAACDx2K3Vn8Hq+7r1m0ZcYbq9kz6x8Qh7yH1e4bV9m2Ww1AAAAJgZ3n8rGd5/\n"
        "-----END OPENSSH PRIVATE KEY-----\ndone"
    )
    assert redact(text) == "Writing deploy key:\n[REDACTED:private-key]\ndone"


def test_private_key_cut_before_its_end_line_is_still_replaced():
    text = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    assert "MIIEow" not in redact(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DB_PASSWORD=correct-horse-battery", "DB_PASSWORD=[REDACTED:password]"),
        ("SECRET_KEY=django-insecure-8f$k2", "SECRET_KEY=[REDACTED:secret]"),
        (
            '{"username": "ada", "password": "hunter2!"}',
            '{"username": "ada", "password": "[REDACTED:password]"}',
        ),
        ("password: Tr0ub4dor&3", "password: [REDACTED:password]"),
        ("  api_key = 'a8f5f167f44f4964e6c998dee827110c'", "  api_key = '[REDACTED:api-key]'"),
        (
            "GET /login?user=ada&password=Xk29dd01&next=/home",
            "GET /login?user=ada&password=[REDACTED:password]&next=/home",
        ),
        (
            "mysql --user=root --password=Xk29dd01 app",
            "mysql --user=root --password=[REDACTED:password] app",
        ),
        (
            '{"env": "GITHUB_TOKEN=\\"t0k3n-value\\""}',
            '{"env": "GITHUB_TOKEN=\\"[REDACTED:token]\\""}',
        ),
    ],
)
def test_secret_assignments_in_env_and_config_text(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        # Hashes and ids are not secrets.
        "commit 3f786850e387550fdab836ed7e6dc881de23001b\nAuthor: Ada <ada@example.com>",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "request id 550e8400-e29b-41d4-a716-446655440000",
        # Code that talks about secrets without holding one.
        'password = request.form["password"]',
        "self.token = token",
        "token = get_token(session)",
        "def login(username: str, password: str) -> Token:",
        "api_key = os.environ['OPENAI_API_KEY']",
        "secret = args.secret",
        "if password == confirm:",
        "max_tokens=24000, total_tokens: 1200",
        'for key, value in headers.items(): key = "X-Trace"',
        "OPENAI_API_KEY=${OPENAI_API_KEY}",
        "GOOGLE_CLIENT_SECRET: process.env.GOOGLE_CLIENT_SECRET,",
        'password: "Enter your password"',
        "curl -H 'Authorization: Bearer $GITHUB_TOKEN' https://api.github.com/user",
        "curl -H 'Authorization: bearer YOUR_GITHUB_TOKEN' https://api.github.com/user",
        # Prose and ordinary URLs.
        "Use a Bearer token in the Authorization header.",
        "git clone git@github.com:acme/app.git && open https://user@example.com/docs",
        "http://localhost:8000/api?page=2&sort=desc",
        "risk-assessment-task-sk-learn-pipeline and disk-usage-report-2024",
        "The tokenizer splits text; see token_count and the passwords table.",
        "postgres://app:${PGPASSWORD}@db:5432/app",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert redact(text) == text


def test_empty_and_clean_text_pass_through():
    assert redact("") == ""
    code = "def add(a, b):\n    return a + b\n"
    assert redact(code) is code


def test_markers_name_known_kinds():
    out = redact(f"{OPENAI} {GOOGLE} {GITHUB} {JWT}")
    for kind in ("openai-key", "google-api-key", "github-token", "jwt"):
        assert f"[REDACTED:{kind}]" in out
        assert kind in KINDS


def test_redaction_is_idempotent():
    text = f"OPENAI_API_KEY={OPENAI}\npostgres://app:pw-123456@db/x\npassword: hunter22"
    once = redact(text)
    assert redact(once) == once


def test_the_work_grows_in_step_with_the_text():
    # Tool-output-like text with plenty of near misses; not a benchmark, a guard against a
    # pattern going quadratic: four times the text may take about four times the CPU, never
    # sixteen. CPU time of this process, the best of three, so other work on the machine
    # does not count.
    chunk = (
        "tokens=12 key=value password: str self.token = token sk-learn disk-usage "
        "3f786850e387550fdab836ed7e6dc881de23001b https://example.com/a?b=c Bearer\n"
    )

    def cpu(size: int) -> float:
        text = chunk * (size // len(chunk))
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            assert redact(text) == text
            best = min(best, time.process_time() - start)
        return best

    small, large = cpu(500_000), cpu(2_000_000)
    assert large < 8 * small, (small, large)


# -- every planted format (tests/helpers/secrets.py), and text that only looks like one ----------
@pytest.mark.parametrize("planted", PLANTED, ids=lambda p: p.name)
def test_each_planted_format_is_redacted_and_its_context_kept(planted):
    out = redact(planted.text)
    for secret in planted.secrets:
        assert secret not in out
    assert planted.anchor in out
    assert "[REDACTED:" in out
    assert redact(out) == out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis://:Hx4kPz8QwR2m@cache:6379/0", "redis://:[REDACTED:password]@cache:6379/0"),
        (
            "mysql -uroot -pTr7bQx2Lm9Zk shop",
            "mysql -uroot -p[REDACTED:password] shop",
        ),
        (
            "mysqldump -u root -p'Tr7b Qx2' shop",
            "mysqldump -u root -p'[REDACTED:password]' shop",
        ),
        ("sshpass -p 'Wq8mZt3' ssh ada@host", "sshpass -p '[REDACTED:password]' ssh ada@host"),
        ("redis-cli -h cache -a Hx4kPz8Qw ping", "redis-cli -h cache -a [REDACTED:password] ping"),
        (
            "docker login -u ada -p Wq8mZt3Lx reg.io",
            "docker login -u ada -p [REDACTED:password] reg.io",
        ),
        ("psql --password Wq8mZt3Lx", "psql --password [REDACTED:password]"),
        ("gh auth login --token gho_short1", "gh auth login --token [REDACTED:token]"),
        (
            "AccountName=acme;AccountKey=q7Zt3Lx9Pm2Vn8Rb4Wc6Hs1Jf5Gy0Ku3Ea7==;EndpointSuffix=x",
            "AccountName=acme;AccountKey=[REDACTED:secret];EndpointSuffix=x",
        ),
        (
            "https://hooks.slack.com/services/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",
            "https://hooks.slack.com/services/[REDACTED:webhook-url]",
        ),
        (
            "https://discord.com/api/webhooks/112233445566/Zq8Xw2Lm4Np6Rt9Vb1Kc3Hs5",
            "https://discord.com/api/webhooks/[REDACTED:webhook-url]",
        ),
        (
            "my password is Tangerine!Falcon42.",
            "my password is [REDACTED:password].",
        ),
        (
            "The password for the admin account is 'swordfish'",
            "The password for the admin account is '[REDACTED:password]'",
        ),
        ("my password is swordfish", "my password is [REDACTED:password]"),
        (
            "Set-Cookie: session=k3q9zt7wmx2lp8vn4rb6; Path=/; HttpOnly",
            "Set-Cookie: session=[REDACTED:cookie]; Path=/; HttpOnly",
        ),
        (
            '{"name": "sessionid", "value": "k3q9zt7wmx2lp8vn4rb6hs1j", "domain": "x"}',
            '{"name": "sessionid", "value": "[REDACTED:cookie]", "domain": "x"}',
        ),
        (
            "X-Shopify-Hmac-Sha256: 9c4e1f7a2b8d3e6f0a5c9b2d7e4f1a8c",
            "X-Shopify-Hmac-Sha256: [REDACTED:secret]",
        ),
        ('"auth": "YWRhOlRhbmdlcmluZUZhbGNvbjQy"', '"auth": "[REDACTED:credential]"'),
        ("STRIPE_KEY=rk9Zt2Lx9Pm4Vn7Rb3Wc6Hs1", "STRIPE_KEY=[REDACTED:secret]"),
        (
            '{\\"clientSecret\\": \\"Lm4Np6Rt9Vb1Kc3Hs5\\"}',
            '{\\"clientSecret\\": \\"[REDACTED:secret]\\"}',
        ),
    ],
)
def test_passwords_on_command_lines_urls_cookies_headers_and_prose(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "the password is incorrect",
        "The password is required.",
        "The password for the admin user is stored in Vault.",
        "my password is in the keychain",
        "session_id = 'test-session-123'",
        '"sessionId": "5a3f2c1e-7b8d-4e9f-a0b1-c2d3e4f5a6b7"',
        '{"file_key": "mLzr95Yi2kwGyZBc44QiV7"}',
        '{"name": "User-Agent", "value": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36"}',
        '{"name": "x-vercel-id", "value": "fra1::iad1::8k2vq-1764000000000-3f7a9c2e1b4d"}',
        'gum input --password --header="Enter Windows password:"',
        "X-Request-Id: 3f786850e387550fdab836ed7e6dc881de23001b",
        "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "x-axis max-width: 100px; X-Content-Type-Options: nosniff",
        "git checkout -b feature/login && docker run -u 1000:1000 app",
        "mysql -u root -p shop; mysql -P 3306 -h db",
        "--token TOKEN  Use --password to set it; pass the token to the client",
        'curl -u "$USER:$TOKEN" https://x',
        "Set-Cookie: theme=dark; Path=/; HttpOnly",
        "cache_key = 'user:42:profile:v2'",
        "PUBLIC_KEY=MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE",
        "author: Ada Lovelace; auth: true; sid = 12",
        '"jsonwebtoken": "^9.0.2", "node-fetch": "~2.6.7"',
        "--secret-file ./secret.txt; redis-cli -h cache ping",
    ],
)
def test_text_that_only_looks_like_a_new_format_is_left_alone(text):
    assert redact(text) == text


def test_printable_drops_terminal_escapes_and_keeps_the_text():
    assert printable(ESCAPES + "\nok\ttab") == "redlink\nok\ttab"
    assert printable("10%\r20%\r\nend") == "10%\n20%\nend"
    assert printable("\x9b2J plain é 日本") == " plain é 日本"
    assert printable(None) == ""

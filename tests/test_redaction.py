"""Redaction: every kind of secret and identity goes, what the matcher needs stays, in linear time.

Each case of KINDS is one line a person could paste inside an error, what must be gone from it,
and what must stay. The fake keys are built from a seeded generator at import, in each vendor's
shape, so that no scanner mistakes this file for a leak.
"""

import random
import string
import time

import pytest

from app.checker import collect_entry_files, load_entry_files, signature_records
from app.inbox import clusters, record_unknown
from app.matching.signature_tier import SignatureMatcher
from app.redaction import MAX_REDACT_CHARS, cap_at_space, library_findings, redact
from app.tracebacks import parse_traceback
from tests.conftest import REPO_CONTENT
from tests.hostile_inputs import hostile_text

_rng = random.Random(20261201)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def fake(n: int, alphabet: str = ALNUM) -> str:
    """n characters that look like a key: at least two digits and both cases, as real keys do."""
    while True:
        out = "".join(_rng.choice(alphabet) for _ in range(n))
        if alphabet is not ALNUM or (
            sum(c.isdigit() for c in out) >= 3 and any(c.isupper() for c in out)
        ):
            return out


AWS_ID = "AKIA" + fake(16, string.ascii_uppercase + string.digits)
AWS_TEMP_ID = "ASIA" + fake(16, string.ascii_uppercase + string.digits)
AWS_SECRET = fake(19) + "/" + fake(20)
GCP_KEY = "AIza" + fake(35)
GH_CLASSIC = "ghp_" + fake(36)
GH_OAUTH = "gho_" + fake(36)
GH_APP = "ghs_" + fake(36)
GH_FINE = "github_pat_" + fake(22) + "_" + fake(59)
GLPAT = "glpat-" + fake(20)
SLACK = "xoxb-" + fake(12, string.digits) + "-" + fake(13, string.digits) + "-" + fake(24)
STRIPE = "sk_live_" + fake(24)
STRIPE_RESTRICTED = "rk_live_" + fake(24)
OPENAI = "sk-proj-" + fake(48) + "T3BlbkFJ" + fake(48)
OPENAI_LEGACY = "sk-" + fake(48)
ANTHROPIC = "sk-ant-api03-" + fake(93)
HF = "hf_" + fake(34)
NPM = "npm_" + fake(36)
PYPI = "pypi-AgEIcHlwaS5vcmc" + fake(70)
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkYXZlIn0." + fake(43)
WANDB = fake(40, HEX)
SHA256 = fake(64, HEX)
SENDGRID = "SG." + fake(22) + "." + fake(43)
TWILIO = "SK" + fake(32, HEX)
DATABRICKS = "dapi" + fake(32, HEX)
DIGITALOCEAN = "dop_v1_" + fake(64, HEX)
SHOPIFY = "shpat_" + fake(32, HEX)
MAILCHIMP = fake(32, HEX) + "-us14"
GROQ = "gsk_" + fake(52)
REPLICATE = "r8_" + fake(37)
TELEGRAM = fake(10, string.digits) + ":AA" + fake(33)
AZURE_KEY = fake(86) + "=="
AZURE_CLIENT_SECRET = "ab1" + "8Q~" + fake(34)
GOOGLE_OAUTH = "ya29." + fake(60)
PFT = "pft_" + fake(24)
KEY_ID = fake(40, HEX)
NPM_AUTH = fake(36)
KAGGLE = fake(32, HEX)
RANDOM = fake(44)
PASSWORD = "Tr0ub4dor" + fake(4)
BASIC = "ZGF2ZTpodW50ZXIy" + fake(8)
PEM_BODY = "\n".join(fake(64) for _ in range(4))

# (kind, a pasted line, what must be gone, what must stay)
KINDS: list[tuple[str, str, list[str], list[str]]] = [
    # cloud keys
    ("AWS access key id", f"ClientError: AccessDenied for {AWS_ID} on put_object", [AWS_ID], ["ClientError: AccessDenied for", "on put_object"]),
    ("AWS temporary key id", f"ClientError: ExpiredToken: the key {AWS_TEMP_ID} has expired", [AWS_TEMP_ID], ["ExpiredToken: the key", "has expired"]),
    ("AWS secret key (env)", f"RuntimeError: bad credentials AWS_SECRET_ACCESS_KEY={AWS_SECRET} rejected", [AWS_SECRET], ["RuntimeError: bad credentials AWS_SECRET_ACCESS_KEY=", "rejected"]),
    ("AWS secret key (bare)", f"ValueError: cannot sign with '{AWS_SECRET}'", [AWS_SECRET], ["ValueError: cannot sign with"]),
    ("GCP API key", f"PermissionDenied: 403 API key {GCP_KEY} not valid", [GCP_KEY], ["PermissionDenied: 403 API key", "not valid"]),
    ("GCP OAuth token", f"RefreshError: token {GOOGLE_OAUTH} expired", [GOOGLE_OAUTH], ["RefreshError:", "expired"]),
    ("GCP service account key id", f'ValueError: bad key file {{"private_key_id": "{KEY_ID}"}}', [KEY_ID], ["ValueError: bad key file", "private_key_id"]),
    ("Azure storage key", f"ValueError: DefaultEndpointsProtocol=https;AccountName=acmeml;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net", [AZURE_KEY, "acmeml"], ["ValueError: DefaultEndpointsProtocol=https;AccountName=", "AccountKey="]),
    ("Azure SAS token", "HttpResponseError: 403 https://acmeml.blob.core.windows.net/ckpt/model.pt?sv=2022-11-02&sig=q8Zk%2BPw4%3D", ["acmeml", "q8Zk%2BPw4%3D"], ["HttpResponseError: 403", "/ckpt/model.pt"]),
    ("Azure client secret", f"ClientAuthenticationError: AADSTS7000215 secret {AZURE_CLIENT_SECRET} invalid", [AZURE_CLIENT_SECRET], ["ClientAuthenticationError: AADSTS7000215", "invalid"]),
    # vendor tokens
    ("Slack bot token", f"SlackApiError: invalid_auth for {SLACK}", [SLACK], ["SlackApiError: invalid_auth for"]),
    ("Slack webhook", f"HTTPError: 404 posting to https://hooks.slack.com/services/T0{fake(8)}/B0{fake(8)}/{fake(24)}", ["hooks.slack.com/services/T0"], ["HTTPError: 404 posting to"]),
    ("Stripe secret key", f"AuthenticationError: Invalid API Key provided: {STRIPE}", [STRIPE], ["AuthenticationError: Invalid API Key provided:"]),
    ("Stripe restricted key", f"PermissionError: {STRIPE_RESTRICTED} lacks scope", [STRIPE_RESTRICTED], ["PermissionError:", "lacks scope"]),
    ("OpenAI project key", f"AuthenticationError: Incorrect API key provided: {OPENAI}.", [OPENAI], ["AuthenticationError: Incorrect API key provided:"]),
    ("OpenAI legacy key", f"openai.error.AuthenticationError: key {OPENAI_LEGACY}", [OPENAI_LEGACY], ["openai.error.AuthenticationError: key"]),
    ("Anthropic key", f"AuthenticationError: invalid x-api-key {ANTHROPIC}", [ANTHROPIC], ["AuthenticationError: invalid x-api-key"]),
    ("Hugging Face token", f"OSError: 401 Client Error for token {HF} on repo", [HF], ["OSError: 401 Client Error for token", "on repo"]),
    ("Hugging Face token (env)", f"HfHubHTTPError: 401 with HF_TOKEN={HF}", [HF], ["HfHubHTTPError: 401 with HF_TOKEN="]),
    ("GitHub classic token", f"GitCommandError: auth failed with {GH_CLASSIC}", [GH_CLASSIC], ["GitCommandError: auth failed with"]),
    ("GitHub OAuth token", f"HTTPError: 401 for {GH_OAUTH}", [GH_OAUTH], ["HTTPError: 401 for"]),
    ("GitHub token in a clone URL", f"GitCommandError: clone https://x-access-token:{GH_APP}@github.com/acme/private.git failed", [GH_APP, "x-access-token"], ["GitCommandError: clone https://", "@github.com/", "failed"]),
    ("GitHub fine-grained token", f"HTTPError: 403 {GH_FINE}", [GH_FINE], ["HTTPError: 403"]),
    ("GitLab token", f"GitlabAuthenticationError: 401 token {GLPAT} revoked", [GLPAT], ["GitlabAuthenticationError: 401 token", "revoked"]),
    ("npm token", f"Error: npm ERR! 401 with {NPM}", [NPM], ["npm ERR! 401 with"]),
    ("npmrc auth token", f"Error: //registry.npmjs.org/:_authToken={NPM_AUTH} refused", [NPM_AUTH], ["refused"]),
    ("PyPI token", f"HTTPError: 403 Invalid or non-existent authentication for {PYPI}", [PYPI], ["HTTPError: 403 Invalid or non-existent authentication for"]),
    ("SendGrid key", f"UnauthorizedError: {SENDGRID}", [SENDGRID], ["UnauthorizedError:"]),
    ("Twilio key", f"TwilioRestException: key {TWILIO} unknown", [TWILIO], ["TwilioRestException: key", "unknown"]),
    ("Databricks token", f"DatabricksError: token {DATABRICKS} invalid", [DATABRICKS], ["DatabricksError: token", "invalid"]),
    ("DigitalOcean token", f"HTTPError: 401 {DIGITALOCEAN}", [DIGITALOCEAN], ["HTTPError: 401"]),
    ("Shopify token", f"ShopifyError: {SHOPIFY} denied", [SHOPIFY], ["ShopifyError:", "denied"]),
    ("Mailchimp key", f"ApiClientError: key {MAILCHIMP}", [MAILCHIMP], ["ApiClientError: key"]),
    ("Groq key", f"AuthenticationError: {GROQ}", [GROQ], ["AuthenticationError:"]),
    ("Replicate token", f"ReplicateError: {REPLICATE} unauthorized", [REPLICATE], ["ReplicateError:", "unauthorized"]),
    ("Telegram bot token", f"TelegramError: Unauthorized {TELEGRAM}", [TELEGRAM], ["TelegramError: Unauthorized"]),
    ("this app's API token", f"ConnectionError: token={PFT} refused", [PFT], ["ConnectionError: token=", "refused"]),
    ("W&B key (env)", f"UsageError: WANDB_API_KEY={WANDB} is invalid", [WANDB], ["UsageError: WANDB_API_KEY=", "is invalid"]),
    ("W&B key (login)", f"CommError: wandb login {WANDB} failed", [WANDB], ["CommError: wandb login", "failed"]),
    ("netrc line", f"CommError: machine api.wandb.ai login dave password {WANDB}", ["dave", WANDB], ["CommError: machine api.wandb.ai login"]),
    # auth headers and tokens
    ("JWT", f"InvalidSignatureError: Signature verification failed for {JWT}", [JWT, JWT.split(".")[2]], ["InvalidSignatureError: Signature verification failed for"]),
    ("bearer header", f"HTTPError: 401 with headers {{'Authorization': 'Bearer {RANDOM}'}}", [RANDOM], ["HTTPError: 401 with headers", "Authorization"]),
    ("bare bearer token", f"HTTPError: 401 Bearer {RANDOM} rejected", [RANDOM], ["HTTPError: 401 Bearer"]),
    ("basic auth header", f"HTTPError: 401 Authorization: Basic {BASIC}", [BASIC], ["HTTPError: 401 Authorization: Basic"]),
    ("cookie header", f"HTTPError: 403 Cookie: session={RANDOM}; csrftoken=abc123def", [RANDOM, "abc123def"], ["HTTPError: 403 Cookie:"]),
    ("RSA private key block", f"ValueError: Could not deserialize key data:\n-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----", [PEM_BODY.split()[1], "BEGIN RSA"], ["ValueError: Could not deserialize key data"]),
    ("OpenSSH private key block", f"SSHException: not a valid key\n-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----\nafter", [PEM_BODY.split()[0], PEM_BODY.split()[3]], ["SSHException: not a valid key", "after"]),
    ("private key cut short", f"ValueError: bad PEM -----BEGIN PRIVATE KEY-----\n{PEM_BODY}", [PEM_BODY.split()[2]], ["ValueError: bad PEM"]),
    ("high-entropy string", f"KeyError: 'no such session {RANDOM}'", [RANDOM], ["KeyError: 'no such session"]),
    ("hash", f"RuntimeError: checksum {SHA256} does not match", [SHA256], ["RuntimeError: checksum", "does not match"]),
    ("UUID run id", "CommError: run 3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b not found", ["3f2b8c1e-9a4d"], ["CommError: run", "not found"]),
    # key = value pairs
    ("JSON password", f'ValueError: bad config {{"user": "x", "password": "{PASSWORD}"}}', [PASSWORD], ["ValueError: bad config", '"password": "']),
    ("JSON api_key", f'ValueError: {{"api_key": "{RANDOM}"}}', [RANDOM], ['"api_key": "']),
    ("JSON key (Kaggle)", f'OSError: kaggle.json {{"username":"leena","key":"{KAGGLE}"}}', ["leena", KAGGLE], ["OSError: kaggle.json"]),
    ("YAML password", f"ValueError: password: {PASSWORD}", [PASSWORD], ["ValueError: password:"]),
    ("env secret", f"RuntimeError: DB_PASSWORD={PASSWORD} too short", [PASSWORD], ["RuntimeError: DB_PASSWORD=", "too short"]),
    ("docker auth", f'DockerException: {{"auths": {{"ghcr.io": {{"auth": "{BASIC}"}}}}}}', [BASIC], ["DockerException:"]),
    ("command-line password", f"CalledProcessError: mysql --password {PASSWORD} -e 'x' returned 1", [PASSWORD], ["CalledProcessError: mysql --password", "returned 1"]),
    # URLs
    ("database URL", "OperationalError: postgresql://bob:pw@db.internal/x refused", ["bob", ":pw@", "db.internal"], ["OperationalError: postgresql://<user>:<secret>@<host>/x refused"]),
    ("MySQL URL with IP", f"OperationalError: mysql+pymysql://root:{PASSWORD}@10.1.2.3:3306/ml", [PASSWORD, "10.1.2.3", "root:"], ["OperationalError: mysql+pymysql://", ":3306/ml"]),
    ("Redis URL password only", "ConnectionError: redis://:p4ssw0rd@cache.acme.io:6379/0", ["p4ssw0rd", "cache.acme.io"], ["ConnectionError: redis://", ":6379/0"]),
    ("MongoDB SRV URL", "ServerSelectionTimeoutError: mongodb+srv://alice:pw@cluster0.ab1cd.mongodb.net/db", ["alice", "ab1cd", "mongodb.net"], ["ServerSelectionTimeoutError: mongodb+srv://"]),
    ("signed URL query", f"HTTPError: 403 https://acme-ml.s3.amazonaws.com/w.pt?X-Amz-Credential={AWS_ID}&X-Amz-Signature={SHA256}", [AWS_ID, SHA256, "acme-ml"], ["HTTPError: 403", "/w.pt?X-Amz-Credential="]),
    ("query-string token", f"HTTPError: 401 https://huggingface.co/api/x?token={RANDOM}", [RANDOM], ["https://huggingface.co/api/x?token="]),
    ("Sentry DSN", f"BadDsn: https://{fake(32, HEX)}@o123456.ingest.sentry.io/789", ["o123456", "sentry.io"], ["BadDsn: https://"]),
    ("Discord webhook", f"HTTPError: 401 https://discord.com/api/webhooks/123456789/{fake(68)}", ["webhooks/123456789"], ["HTTPError: 401"]),
    ("git scp URL", "GitCommandError: git@gitlab.acme.com:dave/secret-proj.git not found", ["gitlab.acme.com", "dave", "secret-proj"], ["GitCommandError:", "not found"]),
    ("tilde user in URL", "HTTPError: 404 http://intranet.acme.com/~carol/data.csv", ["carol", "intranet.acme.com"], ["HTTPError: 404", "/data.csv"]),
    # identities
    ("email", "ConnectionError: login as alice.smith@example.com failed", ["alice.smith", "example.com"], ["ConnectionError: login as", "failed"]),
    ("email in angle brackets", "SMTPRecipientsRefused: <bob.jones@acme-corp.de>", ["bob.jones", "acme-corp"], ["SMTPRecipientsRefused:"]),
    ("PostgreSQL user", 'OperationalError: FATAL:  password authentication failed for user "grace"', ["grace"], ['OperationalError: FATAL:  password authentication failed for user "']),
    ("MySQL user and host", "OperationalError: (1045, \"Access denied for user 'heidi'@'10.0.0.7' (using password: YES)\")", ["heidi", "10.0.0.7"], ["OperationalError: (1045,", "Access denied for user", "(using password: YES)"]),
    ("shell prompt", "RuntimeError: see dave@gpu-node-17:~/proj$ nvidia-smi", ["dave", "gpu-node-17"], ["RuntimeError: see", "nvidia-smi"]),
    ("W&B login", "UsageError: Currently logged in as: ivan (acme-ml). Use `wandb login --relogin`", ["ivan", "acme-ml"], ["UsageError: Currently logged in as:", "Use `wandb login --relogin`"]),
    ("uid and user name", "PermissionError: uid=1000(judy) gid=1000(judy) cannot write", ["judy"], ["PermissionError: uid=1000(", "cannot write"]),
    ("USER variable", "KeyError: USER=mallory not in the allow list", ["mallory"], ["KeyError: USER=", "not in the allow list"]),
    ("username pair", "PermissionError: username=oscar is not allowed", ["oscar"], ["PermissionError: username=", "is not allowed"]),
    # paths
    ("home folder", 'FileNotFoundError: [Errno 2] No such file or directory: "/home/alice/secret-project/data.csv"', ["alice", "secret-project"], ["FileNotFoundError: [Errno 2] No such file or directory:", "/data.csv"]),
    ("macOS home", "OSError: /Users/peggy/Downloads/model.safetensors is not a file", ["peggy", "Downloads"], ["OSError:", "/model.safetensors is not a file"]),
    ("Windows home", r"OSError: [WinError 126] C:\Users\trent\proj\ext.dll not found", ["trent", "proj"], ["OSError: [WinError 126]", r"\ext.dll not found"]),
    ("NFS home outside /home", "FileNotFoundError: /nfs/home2/dave/proj/train.py", ["dave", "home2", "proj"], ["FileNotFoundError: <path>/train.py"]),
    ("scratch folder", "OSError: [Errno 28] No space left on device: '/scratch/erin'", ["erin"], ["OSError: [Errno 28] No space left on device: '<path>'"]),
    ("project data folder", "RuntimeError: cannot open /data/users/frank/runs/ckpt_3.pt", ["frank", "runs"], ["RuntimeError: cannot open", "/ckpt_3.pt"]),
    ("UNC share", r"OSError: \\fileserver\share\grace\data.csv is locked", ["fileserver", "grace"], ["OSError:", "data.csv is locked"]),
    ("tilde path", "FileNotFoundError: ~heidi/exp/cfg.yaml", ["heidi", "exp/"], ["FileNotFoundError:", "/cfg.yaml"]),
    ("path with spaces", 'FileNotFoundError: "/Users/Dave Smith/ml runs/x.pt"', ["Dave", "Smith", "ml runs"], ["FileNotFoundError:", "/x.pt"]),
    ("file URL", "OSError: file:///home/kim/notebooks/a.ipynb unreadable", ["kim", "notebooks"], ["OSError:", "/a.ipynb unreadable"]),
    ("conda env name", '  File "/opt/conda/envs/ivan-exp/lib/python3.10/site-packages/torch/nn/functional.py", line 3029, in cross_entropy', ["ivan-exp"], ["site-packages/torch/nn/functional.py\", line 3029, in cross_entropy"]),
    ("venv in a home", "UserWarning: /home/judy/.venv/lib/python3.11/site-packages/torch/cuda/__init__.py:54: CUDA initialization", ["judy", ".venv"], ["site-packages/torch/cuda/__init__.py:54: CUDA initialization"]),
    ("source build", "RuntimeError: at /home/ken/src/pytorch/aten/src/ATen/native/Loss.cpp:92", ["ken", "src/pytorch"], ["aten/src/ATen/native/Loss.cpp:92"]),
    # hosts and addresses
    ("FQDN", "ConnectionError: cannot reach db01.acme-corp.com", ["db01", "acme-corp"], ["ConnectionError: cannot reach"]),
    ("host outside the common TLDs", "ConnectionError: cannot reach models.acme.ninja.internal", ["acme", "ninja"], ["ConnectionError: cannot reach"]),
    ("EC2 host name", "DistNetworkError: connect to ip-10-0-0-5.ec2.internal:29500 timed out", ["ip-10-0-0-5", "ec2"], ["DistNetworkError: connect to", ":29500 timed out"]),
    ("bare AWS node name", "DistStoreError: ip-10-0-0-5 did not join", ["ip-10-0-0-5"], ["DistStoreError:", "did not join"]),
    ("cluster node name", "RuntimeError: NCCL error on gpu-node-17 rank 3", ["gpu-node-17"], ["RuntimeError: NCCL error on", "rank 3"]),
    ("node name with digits", "RuntimeError: srun: error: node17: task 3: Killed; nid001234 too", ["node17", "nid001234"], ["task 3: Killed"]),
    ("pod name", "ChildFailedError: trainer-7f9c8d6b5-x2k4p exited with code 1", ["trainer-7f9c8d6b5-x2k4p"], ["ChildFailedError:", "exited with code 1"]),
    ("host and port", "DistNetworkError: Connection reset by peer gpu-a100-03:29500", ["gpu-a100-03"], ["DistNetworkError: Connection reset by peer", ":29500"]),
    ("host after a word", "RuntimeError: hostname=worker7b cannot resolve", ["worker7b"], ["RuntimeError: hostname=", "cannot resolve"]),
    ("MASTER_ADDR", "ValueError: MASTER_ADDR=10.1.2.3 is unreachable", ["10.1.2.3"], ["ValueError: MASTER_ADDR=", "is unreachable"]),
    ("IPv4", "ConnectionError: (10.2.3.44) failed", ["10.2.3.44"], ["ConnectionError: (", ") failed"]),
    ("IPv6 full", "OSError: connect 2001:0db8:85a3:0000:0000:8a2e:0370:7334 failed", ["2001:0db8", "7334"], ["OSError: connect", "failed"]),
    ("IPv6 compressed", "OSError: connect fe80::1ff:fe23:4567:890a failed", ["fe80", "890a"], ["OSError: connect", "failed"]),
    ("IPv6 with zone", "OSError: connect fe80::1%eth0 failed", ["fe80::1"], ["OSError: connect", "failed"]),
    ("IPv6 in brackets", "DistNetworkError: [2001:db8::17]:29500 refused", ["2001:db8::17"], ["DistNetworkError:", ":29500 refused"]),
    ("IPv4-mapped IPv6", "OSError: from ::ffff:10.0.0.7 refused", ["10.0.0.7", "ffff"], ["OSError: from", "refused"]),
    ("MAC address", "RuntimeError: NIC 3c:ec:ef:12:34:56 down", ["3c:ec:ef:12:34:56"], ["RuntimeError: NIC", "down"]),
]  # fmt: skip

TORCH_FRAME = (
    '  File "/home/qzxv/miniconda3/envs/qzxv-lab/lib/python3.10/site-packages/torch/nn/modules/'
    'module.py", line 1501, in _call_impl'
)
KEPT_FRAME = 'site-packages/torch/nn/modules/module.py", line 1501, in _call_impl'


def _paste(line: str) -> str:
    return f"Traceback (most recent call last):\n{TORCH_FRAME}\n    return forward_call(*args)\n{line}\n"


def test_the_table_holds_sixty_distinct_kinds():
    kinds = [kind for kind, *_ in KINDS]
    assert len(set(kinds)) == len(kinds) >= 60


@pytest.mark.parametrize(("kind", "line", "gone", "kept"), KINDS, ids=[k[0] for k in KINDS])
def test_each_kind_of_secret_is_gone_and_the_error_stays(kind, line, gone, kept):
    out = redact(_paste(line))
    for secret in gone:
        assert secret in line, (kind, secret)  # the table itself: each secret is in its line
        assert secret not in out, (kind, secret, out)
    for part in kept:
        assert part in out, (kind, part, out)
    assert KEPT_FRAME in out and "qzxv" not in out
    exception_type = line.split(":", 1)[0].strip()
    if " " not in exception_type and not exception_type.startswith("File"):
        assert exception_type in out


ORDINARY = [
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total "
    "capacity; 14.21 GiB already allocated; 3.44 MiB free; 14.50 GiB reserved in total by PyTorch)",
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)",
    "RuntimeError: Given groups=1, weight of size [64, 3, 7, 7], expected input[8, 1, 224, 224] "
    "to have 3 channels, but got 1 channels instead",
    "RuntimeError: Error(s) in loading state_dict for ResNet:\n\tMissing key(s) in state_dict: "
    '"layer1.0.conv1.weight", "bn1.running_mean". Unexpected key(s) in state_dict: "fc.bias".',
    "RuntimeError: one of the variables needed for gradient computation has been modified by an "
    "inplace operation: [torch.cuda.FloatTensor [64, 3]], which is output 0 of "
    "ConvolutionBackward0, is at version 2; expected version 1 instead.",
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f3a2b1c0000 in "
    "/usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)",
    "frame #3: _ZN3c106detail14torchCheckFailEPKcS2_jRKSs + 0x6b (0x7f1e4c2d1a2b in libc10.so)",
    "AttributeError: 'DataParallel' object has no attribute 'module_list'. torch.cat x.to(device)",
    "ImportError: libcusparse.so.12: undefined symbol: __nvJitLinkComplete_12_4, version "
    "libnvJitLink.so.12",
    "ValueError: Expected input batch_size (32) to match target batch_size (16).",
    'File "<frozen importlib._bootstrap>", line 1176, in _find_and_load',
    "OSError: We couldn't connect to 'https://huggingface.co' to load this file.",
    "RuntimeError: The server socket has failed to bind to [::]:29500 (errno: 98 - Address "
    "already in use). 127.0.0.1:29500 and localhost:29500",
    "KeyError: 'token'",
    "RuntimeError: the server 2.3.1 and node 4 of 8 disagree on host memory",
    "TypeError: forward() got an unexpected keyword argument 'max_tokens'",
    "ImportError: cannot import name 'secret_sharing' from 'torch.distributed'",
    "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int' in "
    '"/usr/lib/python3.10/multiprocessing/pool.py", line 125',
]


@pytest.mark.parametrize("message", ORDINARY, ids=range(len(ORDINARY)))
def test_an_ordinary_error_comes_out_as_it_went_in(message):
    assert redact(message) == message


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_every_entry_example_is_still_recognised_after_redaction():
    records = signature_records(load_entry_files(collect_entry_files([REPO_CONTENT])))
    matcher = SignatureMatcher(records)
    examples = [r for r in records if r.example]
    lost = [
        r.entry_id
        for r in examples
        if not any(
            hit.signature.entry_id == r.entry_id
            for hit in matcher.match_exception_line(redact(r.example))
        )
    ]
    assert len(examples) > 400 and not lost


def test_the_library_is_a_second_reader():
    """detect-secrets finds what our rules leave: a quoted value of a secret-sounding key. It
    never checks a value with its vendor: that would send the secret over the network."""
    from detect_secrets.settings import get_settings

    verify = "detect_secrets.filters.common.is_ignored_due_to_verification_policies"
    assert verify not in get_settings().filters
    assert library_findings('config: contraseña = "pl4ya-del-mar"') == {"pl4ya-del-mar"}
    out = redact('ValueError: contraseña = "pl4ya-del-mar" no vale')
    assert "pl4ya" not in out and out.startswith("ValueError: contraseña = ")


def test_the_input_is_capped_at_a_space_so_no_half_key_is_left():
    filler = "x " * (MAX_REDACT_CHARS // 2 - 10)
    text = filler + AWS_ID + " tail"
    out = redact(text)
    assert len(out) <= MAX_REDACT_CHARS and AWS_ID[:10] not in out
    assert cap_at_space("abc def", max_chars=5) == "abc"


def _cpu_seconds(text: str) -> float:
    start = time.process_time()
    redact(text, max_chars=len(text))
    return time.process_time() - start


def test_a_hostile_megabyte_is_redacted_in_linear_time():
    half, whole = hostile_text(500_000), hostile_text(1_000_000)
    _cpu_seconds(hostile_text(20_000))  # compile the rules and load the plugins first
    ratio = _cpu_seconds(whole) / _cpu_seconds(half)
    assert ratio < 4, ratio


def test_the_inbox_stores_the_redacted_form(engine):
    line = (
        f"ConnectionError: login as dave@acme.io with {GH_CLASSIC} to gpu-node-17 "
        "(10.2.3.44) via postgresql://bob:pw@db.internal/x, see /nfs/home2/dave/proj/train.py"
    )
    parsed = parse_traceback(_paste(line))
    fingerprint = record_unknown(engine, parsed, client="addr:127.0.0.1")
    from sqlmodel import Session

    with Session(engine) as session:
        [cluster] = clusters(session)
    stored = " ".join([cluster.exception, cluster.message, *cluster.examples])
    assert cluster.fingerprint == fingerprint and cluster.exception == "ConnectionError"
    for secret in ["dave", "acme.io", GH_CLASSIC, "gpu-node-17", "10.2.3.44", "bob", "pw@"]:
        assert secret not in stored, secret
    assert "<path>/train.py" in cluster.examples[0]
    assert "postgresql://<user>:<secret>@<host>/x" in cluster.examples[0]


def test_a_server_with_the_inbox_on_loads_the_rules_before_the_first_paste(
    make_settings, content_dir
):
    from fastapi.testclient import TestClient

    from app.redaction.library import load_plugins
    from app.web import create_app

    load_plugins.cache_clear()
    with TestClient(create_app(make_settings(content_dir, inbox=True))):
        assert load_plugins.cache_info().currsize == 1

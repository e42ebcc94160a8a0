"""The ``debian-readme`` summarization domain: upstream READMEs of Debian packages, each paired with the package's
long description.

Many Debian packages ship their project's README (Markdown or reStructuredText) under ``usr/share/doc/<package>/``.
The package's control file has a ``Description:`` field whose extended part (the lines after the one-line synopsis)
is a paragraph or a few, written by the maintainer to say what the software is and does: the reference summary.
Projects in every language are here (C tools, Go, JavaScript, Perl and Ruby libraries, ...), so the domain differs
from ``pypi-readme`` (Python distributions, one-line summaries) in both its documents and its summaries' length.

    python -m strandline.data.fetch_summaries                    # builds every domain, this one included
    python -m strandline.data.fetch_readmes --debs DIR           # this domain alone, from .deb files already downloaded

The packages are the fixed list ``README_PACKAGES`` (``apt-get download`` fetches each at the release's current
version). They were chosen from the Debian bookworm packages (``all`` and ``amd64``) that ship
``usr/share/doc/<package>/README.md`` (``.markdown``, ``.rst``; gzipped or not; any case) by the rules below,
applied again at every build. The search of 2026-12-08 (``--discover LOG --max-mb 0.5 --sample 1200`` redoes it,
``strandline.data.discover``): 6,690 packages ship such a README; the 1,200 drawn by a hash of their names among
those under 0.5 MB were read, and 659 gave a row; a build, which applies the rules again, keeps 614 (one per
source package).

- not a Python, PyPy or R package, by its name or its source package's (``python3-*``, ``python-*``, ``pypy3-*``,
  ``r-cran-*``, ...): their READMEs are the documents of ``pypi-readme`` and the R packages are those of
  ``r-vignettes``; a package of ``fetch_manuals.MANUAL_PACKAGES``, ``fetch_vignettes.VIGNETTE_PACKAGES`` or a
  distribution of ``pypi-readme`` (by name) is left out too;
- the README (``README.md``, ``readme.md``, ...): Markdown before reST; at least ``fetch_summaries.MIN_CHARS``
  characters of source; its rendered text is cut at a paragraph boundary after ``fetch_manuals.MAX_CHARS``, and
  the paragraphs that repeat the description (``fetch_manuals.in_abstract``) are removed;
- the description: the extended description without the paragraphs about the Debian package rather than the
  software ("This package contains the development files ...") and without the sentences found in the descriptions
  of at least ``BOILERPLATE_TIMES`` of the listed source packages (a team's stock line: "Node.js is an event-based
  server-side JavaScript engine."), 20 to 200 words, English (``fetch_manuals.english_summary``);
- one row per source package (binary packages built from one source ship the same README): the first listed.

Splits: 50% train, 20% val, 30% test by a hash of the source package's name (``fetch_summaries.split_of``).
"""

from __future__ import annotations

import functools
import gzip
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from strandline.data.debian import extract, listed_rows, need
from strandline.data.fetch_manuals import clean_document, english_summary
from strandline.data.fetch_summaries import MIN_CHARS, split_of
from strandline.data.markup import render_text
from strandline.data.segment import split_sentences
from strandline.errors import UserInputError, first_line, script

DOMAIN = "debian-readme"
THEIRS = re.compile(r"python3?-|python-|pypy3?-|r-cran-|r-bioc-|r-other-")  # the other domains' kinds of package
DISCOVER = re.compile(rf"^usr/share/doc/(?!{THEIRS.pattern})[^/]+/(?i:readme)\.(?:md|markdown|rst)(?:\.gz)?$")
_MARKUP = (("md", "markdown"), ("markdown", "markdown"), ("rst", "rst"))  # the README read first wins
# a paragraph about the Debian package rather than the software: "This package contains the development files."
BOILERPLATE_TIMES = 3  # a description sentence in this many source packages' descriptions is a stock line
_PACKAGING = re.compile(r"^\W*this\s+(?:\w+\s+)?(?:meta-?)?package\b", re.IGNORECASE)

README_PACKAGES: tuple[str, ...] = (  # the discovery run of 2026-12-08 (see the module docstring)
    "2ping", "9wm", "ableton-link-dev", "admesh", "ansible-lint", "arjun", "backintime-common", "batctl", "bdii",
    "bio-tradis", "bioperl", "blaeu", "boogie", "btrbk", "bubblewrap", "cafeobj-mode", "can-utils", "cava", "cl-abnf",
    "cl-closer-mop", "clamav-freshclam", "clamav-milter", "cleo", "cmake-fedora", "cmdreader", "cmus", "code-saturne",
    "codespell", "composer", "cryptmount", "danmaq", "datalad", "dav1d", "dhcpig", "diffuse", "distcc", "dnstwist",
    "dovecot-fts-xapian", "downtimed", "dreamchess", "dublin-traceroute", "e2wm", "eclipse-debian-helper",
    "ejabberd-mod-spam-filter", "elpa-a", "elpa-atomic-chrome", "elpa-bash-completion", "elpa-ctable",
    "elpa-doom-themes", "elpa-f", "elpa-flycheck", "elpa-haskell-mode", "elpa-ht", "elpa-irony", "elpa-ivy",
    "elpa-markdown-toc", "elpa-org-roam", "elpa-php-mode", "elpa-scala-mode", "elpa-yaml", "elpa-zenburn-theme",
    "emacs-libvterm", "encfs", "f3", "feh", "fflas-ffpack", "findimagedupes", "flake8", "flawfinder", "fontmake",
    "fonts-gotico-antiqua", "fonts-opendyslexic", "fonts-spleen", "fpart", "fst-dev", "gamemode", "gap-float",
    "gap-laguna", "ghdl-common", "gifsicle", "git-evtag", "git-imerge", "gjs", "gla11y", "gnome-mousetrap",
    "gnome-music", "gnome-shell-extension-caffeine", "gnome-shell-extension-espresso",
    "gnome-shell-extension-pixelsaver", "gnome-shell-extension-top-icons-plus", "gntp-send", "gobject-introspection",
    "golang-github-bugsnag-bugsnag-go-dev", "golang-github-bugsnag-panicwrap-dev",
    "golang-github-circonus-labs-circonus-gometrics-dev", "golang-github-dgrijalva-jwt-go-dev",
    "golang-github-golang-groupcache-dev", "golang-github-juju-errors-dev", "golang-github-klauspost-cpuid-dev",
    "golang-github-markbates-goth-dev", "golang-github-peterbourgon-diskv-dev", "golang-github-pquerna-otp-dev",
    "golang-github-robfig-config-dev", "golang-github-steveyen-gtreap-dev", "golang-github-tdewolff-minify-dev",
    "golang-gopkg-square-go-jose.v2-dev", "gp-saml-gui", "gpodder", "gpx", "grabc", "gtkterm", "gtml", "guake", "gulp",
    "hebcal", "hime", "howdoi", "ibus-braille", "imv", "imx-usb-loader", "inkscape-survex-export", "ipcalc-ng",
    "iperf3", "iptux", "irssi-plugin-xmpp", "ivar", "jattach", "jitterdebugger", "jumpnbump", "kalign", "kanjidraw",
    "kcat", "keyringer", "kma", "kthresher", "kytos-utils", "kyua", "libaacs0", "libaec0", "libapache2-mod-auth-mellon",
    "libarcus3", "libaubio-dev", "libblosc-dev", "libcbor0.8", "libclj-stacktrace-clojure",
    "libcohttp-lwt-jsoo-ocaml-dev", "libcolpack-dev", "libcore-cache-clojure", "libcore-memoize-clojure",
    "libcpuinfo-dev", "libcrmcommon34", "libdata-xml-clojure", "libexpected-dev", "libffi-dev", "libfl-dev",
    "libfstrm0", "libfuse2", "libglm-dev", "libgnome-bg-4-2", "libheif-dev", "libhighwayhash-dev",
    "libignition-math6-6", "libimobiledevice6", "libiperf-dev", "libjansson4", "libjs-bignumber", "libjs-ismobilejs",
    "libjs-jquery-flot", "libjs-jquery-flot-axislabels", "libjs-jquery-hotkeys", "libjs-jquery-jgrowl",
    "libjs-markdown-it-html5-embed", "libjs-material-design-lite", "libjs-psl", "libjs-schoolkit",
    "libjs-textarea-caret", "libjs-tinycon", "libjs-webrtc-adapter", "liblaxjson-dev",
    "liblocale-maketext-gettext-perl", "liblxi-dev", "libmail-dkim-perl", "libmapbox-variant-dev", "libmetrohash-dev",
    "libmmap-allocator-dev", "libmobi-dev", "libmobi0", "libmodbus-dev", "libmodbus5", "libmoox-configfromfile-perl",
    "libmsgpuck-dev", "libnghttp2-dev", "libnifti-dev", "libnlopt0", "libntru-0.5", "libodoc-parser-ocaml-dev",
    "libpam-google-authenticator", "libpgocaml-ocaml-dev", "libpgp-sign-perl", "libpgtcl", "libpomegranate-clojure",
    "libppx-compare-ocaml-dev", "libppx-fields-conv-ocaml-dev", "libprimesieve11", "libpuppetlabs-i18n-clojure",
    "libriemann-client0", "libroaring-dev", "librsync2", "libseccomp-dev", "libsixel-dev", "libsoundio-dev",
    "libspatialaudio-dev", "libspecter-clojure", "libssl-utils-clojure", "libstonithd26", "libtools-deps-clojure",
    "libusbmuxd-dev", "libutf8proc2", "libvdt-dev", "libvlfeat-dev", "libwebcam0-dev", "libwebsockets-dev",
    "libxmltv-perl", "libzeep-dev", "link-grammar", "lrzip", "lsyncd", "lua-unit", "luakit", "makefile2graph",
    "manpages-el", "manpages-id", "manpages-mk", "manpages-nb", "manpages-nl-dev", "mbpoll", "memtest86+", "mergerfs",
    "mimedefang", "minetest-mod-moreores", "minetest-mod-protector", "minisign", "misspell-fixer", "mopidy-mpd",
    "mopidy-somafm", "mosh", "mp3report", "mydumper", "nanofilt", "nethogs", "network-manager-l2tp", "nghttp2-client",
    "nghttp2-server", "nim-lapper-dev", "nitrokey-app", "node-ajv", "node-any-promise", "node-aproba", "node-argv",
    "node-array-from", "node-asn1.js", "node-assert", "node-assertive", "node-ast-util", "node-async-limiter",
    "node-asynckit", "node-aws4", "node-babel-loader", "node-babylon", "node-bluebird", "node-busboy", "node-cacache",
    "node-call-limit", "node-chainsaw", "node-clarinet", "node-clipboard", "node-collection-visit", "node-columnify",
    "node-combine-source-map", "node-commoner", "node-compression-webpack-plugin", "node-configurable-http-proxy",
    "node-convert-source-map", "node-cookie", "node-copy-paste", "node-copy-webpack-plugin", "node-core-js-pure",
    "node-cosmiconfig", "node-css", "node-cuint", "node-d3", "node-d3-chord", "node-d3-force", "node-d3-path",
    "node-d3-polygon", "node-d3-queue", "node-diff", "node-doctrine", "node-dom4", "node-domain-browser",
    "node-domhandler", "node-dompurify", "node-duration", "node-ebnf-parser", "node-ejs", "node-es-module-lexer",
    "node-es6-map", "node-es6-promise", "node-es6-weak-map", "node-escodegen", "node-eventemitter2", "node-exit-hook",
    "node-expect.js", "node-express", "node-extglob", "node-falafel", "node-faye-websocket", "node-fecha",
    "node-file-loader", "node-find-up", "node-foreground-child", "node-fs-extra", "node-fstream",
    "node-fuzzaldrin-plus", "node-generic-pool", "node-get-func-name", "node-glob-base", "node-graphql",
    "node-grunt-contrib-uglify", "node-gulp-changed", "node-gulp-coffee", "node-gulp-load-plugins", "node-gulp-postcss",
    "node-gulp-rename", "node-hash-test-vectors", "node-highlight.js", "node-http-server", "node-https-proxy-agent",
    "node-i18next-browser-languagedetector", "node-immutable-tuple", "node-imports-loader", "node-ini",
    "node-ip-address", "node-is-data-descriptor", "node-is-directory", "node-is-plain-object", "node-isstream",
    "node-jju", "node-js-beautify", "node-js-cookie", "node-js-sdsl", "node-jschardet", "node-jsonfile", "node-jsprim",
    "node-keygrip", "node-leveldown", "node-levn", "node-lib0", "node-lightgallery", "node-locate-path",
    "node-loud-rejection", "node-ltx", "node-map-cache", "node-marked", "node-marked-man", "node-minimist",
    "node-mississippi", "node-modern-syslog", "node-node-dir", "node-nodemailer", "node-p-limit",
    "node-path-browserify", "node-pegjs", "node-pikaday", "node-platform", "node-popper2", "node-progress",
    "node-prompts", "node-prosemirror-markdown", "node-pseudomap", "node-punycode", "node-q", "node-ramda",
    "node-react-popper", "node-react-shallow-renderer", "node-readable-stream", "node-regenerate", "node-require-all",
    "node-require-dir", "node-resolve", "node-rollup-plugin-node-polyfills", "node-rx", "node-schema-utils",
    "node-should", "node-smart-buffer", "node-split-string", "node-stack-utils", "node-starttls", "node-static-eval",
    "node-static-extend", "node-statuses", "node-stealthy-require", "node-stream-array", "node-stream-http",
    "node-stream-to-observable", "node-superagent", "node-tap", "node-tape", "node-tar-stream", "node-thenify-all",
    "node-three-orbit-controls", "node-tmp", "node-to-regex-range", "node-tweetnacl", "node-typanion",
    "node-ua-parser-js", "node-uglify-save-license", "node-ultron", "node-undici", "node-unicode-15.0.0", "node-unorm",
    "node-url-parse-lax", "node-vary", "node-vasync", "node-vows", "node-vue", "node-warning", "node-webrtc-adapter",
    "node-whatwg-fetch", "node-winston", "node-wrap-ansi", "node-ws", "node-y-websocket", "nodeunit", "nrpe-ng",
    "nsxiv", "ntfs2btrfs", "numpy-stl", "nutcracker", "oclgrind", "ocproxy", "octave-symbolic", "offlineimap3",
    "openstack-cluster-installer", "orca-sops", "original-awk", "osm2pgrouting", "osmo-ggsn", "pass-extension-audit",
    "patatt", "pd-flite", "pdfgrep", "peek", "pgbackrest", "php-composer-xdebug-handler", "php-constant-time",
    "php-voku-portable-ascii", "php-wikidiff2", "php-zumba-json-serializer", "phpab", "phpunit-version", "picocom",
    "pisg", "pixiewps", "pkg-js-autopkgtest", "plprofiler", "policyd-rate-limit", "postgresql-15-hypopg",
    "postgresql-15-jsquery", "postgresql-15-pg-track-settings", "postgresql-15-rational", "postgresql-15-semver",
    "postgresql-15-toastinfo", "power-profiles-daemon", "procserv", "prove6", "proxytunnel",
    "puppet-module-puppetlabs-inifile", "puppet-module-puppetlabs-ntp", "puppet-module-puppetlabs-postgresql",
    "puppet-module-rodjek-logrotate", "qconf", "qgis3-survex-import", "raku-getopt-long", "raku-json-class",
    "raku-meta6", "rapidjson-dev", "rdp-alignment", "renderd", "roodi", "ruby-actionpack-page-caching",
    "ruby-addressable", "ruby-adsf", "ruby-ae", "ruby-batch-loader", "ruby-beefcake", "ruby-benchmark-memory",
    "ruby-bootstrap-sass", "ruby-bunny", "ruby-carrierwave", "ruby-childprocess", "ruby-chronic", "ruby-chunky-png",
    "ruby-columnize", "ruby-combustion", "ruby-contracts", "ruby-cvss-suite", "ruby-damerau-levenshtein",
    "ruby-delayed-job", "ruby-delayer-deferred", "ruby-devise-two-factor", "ruby-em-spec", "ruby-entypo-rails",
    "ruby-enumerable-statistics", "ruby-enumerize", "ruby-equalizer", "ruby-et-orbi", "ruby-fakeredis", "ruby-faraday",
    "ruby-feature", "ruby-ffaker", "ruby-fugit", "ruby-fuzzyurl", "ruby-gettext-i18n-rails-js", "ruby-gitlab-labkit",
    "ruby-graphlient", "ruby-graphql-errors", "ruby-graphviz", "ruby-hashie", "ruby-heapy", "ruby-hocon",
    "ruby-html-proofer", "ruby-http", "ruby-http-accept-language", "ruby-http-cookie", "ruby-httparty", "ruby-jbuilder",
    "ruby-jekyll-mentions", "ruby-jekyll-paginate-v2", "ruby-jekyll-relative-links", "ruby-jekyll-toc",
    "ruby-json-spec", "ruby-kramdown", "ruby-license-finder", "ruby-mab", "ruby-mail", "ruby-mail-gpg",
    "ruby-marginalia", "ruby-memory-profiler", "ruby-method-source", "ruby-minitest-utils", "ruby-mixlib-config",
    "ruby-mixlib-shellout", "ruby-mocha", "ruby-money", "ruby-msgpack", "ruby-multipart-post", "ruby-mustermann",
    "ruby-net-ssh", "ruby-net-ssh-gateway", "ruby-nokogiri", "ruby-openssl-signature-algorithm",
    "ruby-otr-activerecord", "ruby-paint", "ruby-pastel", "ruby-pdf-inspector", "ruby-peek-rblineprof",
    "ruby-posix-spawn", "ruby-prawn-svg", "ruby-puppetserver-ca-cli", "ruby-qr4r", "ruby-rb-inotify", "ruby-recaptcha",
    "ruby-representable", "ruby-rest-client", "ruby-reverse-markdown", "ruby-riot", "ruby-roadie", "ruby-ronn",
    "ruby-rotp", "ruby-rspec-junit-formatter", "ruby-rubygems", "ruby-sidekiq-cron", "ruby-simple-captcha2",
    "ruby-stackprof", "ruby-state-machines", "ruby-string-direction", "ruby-symboltable", "ruby-test-construct",
    "ruby-thread-safe", "ruby-timers", "ruby-tty-prompt", "ruby-tty-screen", "ruby-twitter", "ruby-wait-for-it",
    "ruby-webauthn", "ruby-webpack-rails", "ruby-webrick", "ruby-websocket-extensions", "ruby-wisper", "ruby-zip",
    "rubygems-integration", "safe-rm", "schleuder-gitlab-ticketing", "sibelia", "sigviewer", "simple-tpm-pk11",
    "slepc-dev", "slurm-wlm", "smcroute", "sniffles", "snmpsim", "ssg-base", "sslh", "stow", "sunxi-tools",
    "supercollider-gedit", "sxid", "sympow", "sysbench", "sysdig", "tcl-tclreadline", "tcl-yajltcl", "tdom",
    "telegram-send", "terminus", "tesseract-ocr", "timekpr-next", "tlog", "tmux-themepack-jimeh", "tnat64",
    "tophat-recondition", "tox-delay", "txt2html", "usbrelay", "uxplay", "vagrant-hostmanager", "variety",
    "velvetoptimiser", "vim-textobj-user", "vim-youcompleteme", "virulencefinder", "wafw00f", "wapiti", "webdis",
    "whalebuilder", "window-size", "wxastrocapture", "xcb-proto", "xmldiff", "xsecurelock", "yaggo", "yapf3", "yard",
    "yarsync", "yotta", "zchunk", "zsh-theme-powerlevel9k", "zvbi",
)  # fmt: skip


def extended_description(description: str) -> str:
    """The extended part of a control file's ``Description`` field (the lines after the synopsis) as one line of
    text, without the paragraphs that describe the Debian package (``_PACKAGING``); ``.`` lines separate
    paragraphs."""
    lines = description.splitlines()[1:]
    paragraphs, current = [], []
    for line in [*lines, " ."]:
        if line.strip() == ".":
            if current:
                paragraphs.append(" ".join(current))
            current = []
        else:
            current.extend(line.split())
    return " ".join(p for p in paragraphs if not _PACKAGING.match(p))


def control_fields(deb: Path) -> tuple[str, str]:
    """(source package, Description) of a .deb's control file (``dpkg-deb -f``)."""
    need("dpkg-deb")
    r = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Source", "Description"], capture_output=True,
                       text=True, errors="replace")  # fmt: skip
    if r.returncode:
        raise UserInputError(f"{deb}: not a readable .deb ({first_line(r.stderr) or r.returncode})")
    fields: dict[str, str] = {}
    key = None
    for line in r.stdout.splitlines():
        m = re.match(r"^([\w-]+):\s?(.*)$", line)
        if m and not line.startswith(" "):
            key = m.group(1)
            fields[key] = m.group(2)
        elif key:
            fields[key] += "\n" + line
    source = (fields.get("Source") or fields.get("Package") or deb.name.split("_")[0]).split("(")[0].strip()
    return source, fields.get("Description", "")


def find_readme(doc: Path) -> tuple[str, str] | None:
    """(source text, markup) of the README in a package's doc folder (its name in any case: README.md, readme.md),
    or None."""
    files = {p.name.lower(): p for p in sorted(doc.iterdir(), reverse=True)} if doc.is_dir() else {}
    for ext, markup in _MARKUP:
        for name in (f"readme.{ext}", f"readme.{ext}.gz"):
            path = files.get(name)
            if path is not None and path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                if name.endswith(".gz"):
                    try:
                        data = gzip.decompress(data)
                    except (OSError, EOFError):
                        continue
                return data.decode("utf-8", errors="replace"), markup
    return None


def without(summary: str, boilerplate: frozenset[str]) -> str:
    """A description without its sentences in ``boilerplate`` (``normalized`` sentences)."""
    return " ".join(s.text for s in split_sentences(summary) if normalized(s.text) not in boilerplate)


def normalized(sentence: str) -> str:
    return " ".join(re.findall(r"\w+", sentence.lower()))


def boilerplate_of(descriptions: list[str], times: int = BOILERPLATE_TIMES) -> frozenset[str]:
    """The sentences (``normalized``) found in at least ``times`` of ``descriptions``: a maintainers' team's
    stock line ("Node.js is an event-based server-side JavaScript engine."), not about the package's README."""
    counts = Counter(k for d in descriptions for k in {normalized(s.text) for s in split_sentences(d)})
    return frozenset(k for k, n in counts.items() if n >= times)


@functools.cache
def others() -> frozenset[str]:
    """The other domains' Debian packages (manuals, vignettes) and the ``pypi-readme`` domain's distributions, by
    name (lower case, ``-`` for ``_`` and ``.``): names this domain leaves out."""
    from strandline.data.fetch_manuals import MANUAL_PACKAGES
    from strandline.data.fetch_summaries import PYPI_PINS, PYPI_WHEEL_PINS
    from strandline.data.fetch_vignettes import VIGNETTE_PACKAGES

    pypi = {re.sub(r"[._]", "-", pin.split("==")[0].lower()) for pin in (*PYPI_PINS, *PYPI_WHEEL_PINS)}
    return frozenset({*MANUAL_PACKAGES, *VIGNETTE_PACKAGES, *pypi})


def rows_of(
    deb: Path, tmp: Path, boilerplate: frozenset[str] = frozenset(), fields: tuple[str, str] | None = None
) -> Iterator[dict]:
    """The row of one downloaded package, if it passes the rules (at most one); ``boilerplate``: sentences left
    out of its description (``boilerplate_of``); ``fields``: its ``control_fields`` when the caller has read them."""
    package = deb.name.split("_")[0]
    source, description = fields or control_fields(deb)
    names = (package, source)
    if any(THEIRS.match(n) for n in names) or others().intersection(names):
        return
    summary = without(extended_description(description), boilerplate)
    if not english_summary(summary):
        return
    found = find_readme(extract(deb, tmp / package) / "usr/share/doc" / package)
    if found is None:
        return
    readme, markup = found
    if len(clean_document(readme, summary)) < MIN_CHARS:
        return
    text = clean_document(render_text(readme, markup), summary)  # as `strandline summarize README.md` reads it
    yield {"id": source, "domain": DOMAIN, "split": split_of(source), "title": package, "text": text,
           "summary": summary, "package": package}  # fmt: skip


def readme_rows(debs: Path, tmp: Path) -> Iterator[dict]:
    """Rows of every package in ``debs`` (``*.deb``), one per source package (the first in name order), their
    descriptions without the sentences that several of them share (``boilerplate_of``)."""
    fields = {deb: control_fields(deb) for deb in sorted(debs.glob("*.deb"))}  # dpkg-deb once per package
    described = {}
    for source, description in fields.values():
        described.setdefault(source, extended_description(description))
    boilerplate = boilerplate_of(list(described.values()))
    seen: set[str] = set()
    for deb, read in fields.items():
        for row in rows_of(deb, tmp, boilerplate, read):
            if row["id"] not in seen:
                seen.add(row["id"])
                yield row


def build_rows(debs: Path | None = None, packages: tuple[str, ...] = README_PACKAGES) -> list[dict]:
    """The domain's rows, from ``debs`` (a folder of .deb files; only the listed packages are read) or from
    ``apt-get download`` of the list."""
    return listed_rows(packages, debs, readme_rows)


@script("fetch_readmes")
def main(argv: list[str] | None = None) -> None:
    from strandline.data.fetch_summaries import domain_main

    domain_main(argv, __doc__.splitlines()[0], DOMAIN, build_rows, (DISCOVER, rows_of))


if __name__ == "__main__":
    raise SystemExit(main())

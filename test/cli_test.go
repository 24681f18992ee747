package test

// The command line's own help: esfs help, the manual page, shell
// completion, did-you-mean suggestions, mount -o as mount(8) users type
// it, and usage mistakes answered with one line that says the fix.

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// oneLineCase is a command that must fail with status code and exactly
// one line on stderr containing want (and none of avoid), nothing on
// stdout.
type oneLineCase struct {
	name  string
	args  []string
	env   []string
	code  int
	want  []string
	avoid []string
}

func runOneLineCases(t *testing.T, cases []oneLineCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mounttest.Run(t, mounttest.Cmd{Args: c.args, Env: append([]string{"ELASTICSEARCH_URL=", "ESFS_ES_URL="}, c.env...),
				Split: true, Limit: 30 * time.Second})
			if r.Code != c.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", r.Code, c.code, r.Stderr)
			}
			if r.Stdout != "" {
				t.Errorf("output on stdout for a mistake:\n%s", r.Stdout)
			}
			if lines := strings.Split(strings.TrimRight(r.Stderr, "\n"), "\n"); len(lines) != 1 {
				t.Errorf("want one line on stderr, got %d:\n%s", len(lines), r.Stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.Stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.Stderr)
				}
			}
			for _, a := range c.avoid {
				if strings.Contains(r.Stderr, a) {
					t.Errorf("stderr has %q:\n%s", a, r.Stderr)
				}
			}
		})
	}
}

// TestCLIHelp: esfs help lists the commands, esfs help mount a command's
// flags (-o among them), on stdout with status 0, and so do esfs alone,
// -h and --help, for the program and for every command wherever the flag
// stands; an unknown topic is a usage mistake with a suggestion.
func TestCLIHelp(t *testing.T) {
	mounttest.QuickExit(t)
	dir := t.TempDir()
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"COMMANDS:", "mount", "search", "completion", "man"}},
		{nil, []string{"COMMANDS:", "mount"}},
		{[]string{"--help"}, []string{"COMMANDS:", "mount"}},
		{[]string{"-h"}, []string{"COMMANDS:", "mount"}},
		{[]string{"--help", "mount"}, []string{"esfs mount - ", "--attr-timeout"}},
		{[]string{"help", "mount"}, []string{"esfs mount", "--attr-timeout", "--read-only", "-o value", "prints nothing once mounted", "mount -o remount,ro DIR"}},
		{[]string{"mount", "--help"}, []string{"esfs mount", "--attr-timeout"}},
		{[]string{"help", "completion"}, []string{"source <(esfs completion bash)"}},
		// The flag after arguments, or before them: the command's help,
		// never the argument taken for a help topic.
		{[]string{"mount", "-h", dir}, []string{"esfs mount - ", "--attr-timeout"}},
		{[]string{"mount", dir, "--help", "-o", "ro"}, []string{"esfs mount - "}},
		{[]string{"search", "foo", "-h"}, []string{"esfs search - ", "--under"}},
		{[]string{"completion", "bash", "--help"}, []string{"esfs completion - "}},
	}
	for _, name := range []string{"mkfs", "mount", "umount", "fsck", "locks", "status", "search", "import", "export", "config", "destroy", "completion", "man"} {
		for _, flag := range []string{"--help", "-h"} {
			cases = append(cases, struct {
				args []string
				want []string
			}{[]string{name, flag}, []string{"esfs " + name + " - ", "USAGE:"}})
		}
	}
	for _, c := range cases {
		r := mounttest.Run(t, mounttest.Cmd{Args: c.args, Env: []string{"ELASTICSEARCH_URL="}, Split: true, Limit: 30 * time.Second})
		if r.Code != 0 || r.Stderr != "" {
			t.Errorf("esfs %q: status %d, stderr %q", c.args, r.Code, r.Stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.Stdout, w) {
				t.Errorf("esfs %q lacks %q:\n%s", c.args, w, r.Stdout)
			}
		}
	}
}

// TestCLISuggestions: a misspelled command, flag or mount option gets
// "did you mean", a name like none gets no guess.
func TestCLISuggestions(t *testing.T) {
	dir := t.TempDir()
	runOneLineCases(t, []oneLineCase{
		{name: "command", args: []string{"mout", dir}, code: 2, want: []string{"unknown command mout: did you mean mount?"}},
		{name: "command, transposed", args: []string{"serach", "foo"}, code: 2, want: []string{"did you mean search?"}},
		{name: "help topic", args: []string{"help", "mout"}, code: 2, want: []string{"unknown command mout: did you mean mount?"}},
		// Two neighbours swapped, the commonest typo, are one edit: five
		// letters allow one, where Levenshtein's distance counts two.
		{name: "command, neighbours swapped", args: []string{"moutn", dir}, code: 2, want: []string{"unknown command moutn: did you mean mount?"}},
		{name: "command of four, neighbours swapped", args: []string{"mfks"}, code: 2, want: []string{"unknown command mfks: did you mean mkfs?"}},
		{name: "help topic, neighbours swapped", args: []string{"help", "fskc"}, code: 2, want: []string{"unknown command fskc: did you mean fsck?"}},
		{name: "flag, neighbours swapped", args: []string{"umount", "--lzay", dir}, code: 2, want: []string{"unknown flag --lzay: did you mean --lazy?"}},
		{name: "flag of five, neighbours swapped", args: []string{"mount", "--deubg", dir}, code: 2, want: []string{"unknown flag --deubg: did you mean --debug?"}},
		{name: "mount option, neighbours swapped", args: []string{"mount", "-o", "laese=20s", dir}, code: 2, want: []string{`mount option "laese" is not an esfs option: did you mean lease?`}},
		{name: "no guess for two swaps", args: []string{"omtnu", dir}, code: 2, want: []string{"unknown command omtnu"}, avoid: []string{"did you mean"}},
		{name: "no guess", args: []string{"frobnicate"}, code: 2, want: []string{"unknown command frobnicate"}, avoid: []string{"did you mean"}},
		{name: "no guess for a flag two edits away", args: []string{"mount", "--frob", dir}, code: 2, want: []string{"unknown flag --frob"}, avoid: []string{"did you mean"}},
		{name: "help flag after a mistake", args: []string{"mount", "--frob", "--help", dir}, code: 2, want: []string{"unknown flag --frob"}},
		{name: "flag", args: []string{"mount", "--atr-timeout=1s", dir}, code: 2, want: []string{"unknown flag --atr-timeout: did you mean --attr-timeout?"}},
		{name: "flag of another command", args: []string{"umount", "--lazzy", dir}, code: 2, want: []string{"did you mean --lazy?"}},
		{name: "flag like none", args: []string{"mount", "--no-such-flag", dir}, code: 2, want: []string{"unknown flag --no-such-flag"}, avoid: []string{"did you mean"}},
		{name: "global flag", args: []string{"--versio"}, code: 2, want: []string{"did you mean --version?"}},
		{name: "mount option", args: []string{"mount", "-o", "alow_other", dir}, code: 2, want: []string{`mount option "alow_other" is not an esfs option: did you mean allow_other?`}},
		{name: "mount option like none", args: []string{"mount", "-o", "colour=blue", dir}, code: 2, want: []string{`"colour" is not an esfs option`}, avoid: []string{"did you mean"}},
	})
}

// TestCLIMessagesSayTheFix: each mistake in a flag's value is refused
// with one line naming the flag (or the variable that set it) and what
// to give instead, before anything is started.
func TestCLIMessagesSayTheFix(t *testing.T) {
	dir := t.TempDir()
	emptyFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	url := "--es-url=" + os.Getenv("ELASTICSEARCH_URL")
	runOneLineCases(t, []oneLineCase{
		{name: "duration without a unit", args: []string{"mount", "--attr-timeout", "5", dir}, code: 2, want: []string{"--attr-timeout 5: a duration needs a unit: 5s"}},
		{name: "duration without a unit, from the environment", args: []string{"mount", dir}, env: []string{"ESFS_LEASE=5"}, code: 2,
			want: []string{"ESFS_LEASE (for --lease) 5: a duration needs a unit: 5s"}},
		{name: "not a duration", args: []string{"mount", "--lease=soon", dir}, code: 2, want: []string{`--lease "soon" is not a duration`}},
		{name: "not a number", args: []string{"mount", "--cache-size=lots", dir}, code: 2, want: []string{`--cache-size "lots" is not a whole number`}},
		{name: "flag without its value", args: []string{"mount", "--index"}, code: 2, want: []string{"--index needs a value"}},
		{name: "a switch given a value", args: []string{"mount", "--read-only=yes", dir}, code: 2, want: []string{"takes true or false"}},
		{name: "bare port", args: []string{"mount", "--metrics-addr", "9567", dir}, code: 2, want: []string{"--metrics-addr 9567: give host:port, such as :9567"}},
		{name: "host without port", args: []string{"mount", "--metrics-addr", "localhost", dir}, code: 2, want: []string{"missing port", "host:port"}},
		{name: "cache size 0", args: []string{"mount", "--cache-size", "0", dir}, code: 2, want: []string{"--cache-size must be at least 1"}},
		{name: "negative timeout", args: []string{"mount", "--entry-timeout=-1s", dir}, code: 2, want: []string{"--entry-timeout must not be negative"}},
		{name: "bad locking", args: []string{"mount", "--locking", "trees", dir}, code: 2, want: []string{`--locking "trees": want tree, document or global`}},
		{name: "short lease", args: []string{"mount", "--lease", "100ms", dir}, code: 2, want: []string{"--lease 100ms: a lease must be at least 500ms"}},
		{name: "zero lock timeout", args: []string{"mount", "--lock-timeout", "0s", dir}, code: 2, want: []string{"--lock-timeout 0s: must be positive"}},
		{name: "zero flush interval", args: []string{"mount", "--flush-interval", "0s", dir}, code: 2, want: []string{"--flush-interval must be positive"}},
		{name: "zero es timeout", args: []string{"mount", url, "--es-timeout", "0s", dir}, code: 2, want: []string{"--es-timeout 0s: must be positive"}},
		{name: "bad log level", args: []string{"mount", "--log-level", "verbose", dir}, code: 2, want: []string{"want debug, info, warn or error"}},
		{name: "mount option without its unit", args: []string{"mount", "-o", "ro,lease=5", dir}, code: 2, want: []string{"-o lease 5: a duration needs a unit: 5s"}},
		{name: "mount option needing a value", args: []string{"mount", "-o", "lease", dir}, code: 2, want: []string{`mount option "lease" needs a value`}},
		{name: "no URL", args: []string{"status"}, code: 2, want: []string{"ELASTICSEARCH_URL (--es-url) is empty"}},
		{name: "shards 0", args: []string{"mkfs", url, "--shards", "0"}, code: 2, want: []string{"--shards must be between 1 and 1024"}},
		{name: "locks with an argument", args: []string{"locks", url, "/x"}, code: 2, want: []string{"locks takes no arguments"}},
		{name: "status with an argument", args: []string{"status", url, "fs"}, code: 2, want: []string{"status takes no arguments", "--index"}},
		{name: "admin session lease too short", args: []string{"fsck", url, "--index", "esfs-never-made", "--repair", "--lease", "0s"}, code: 2, want: []string{"--lease 0s: a lease must be at least 500ms"}},
		{name: "bad replicas", args: []string{"mkfs", url, "--index", "esfs-never-made", "--replicas", "two"}, code: 2, want: []string{`--replicas "two"`, "0-1"}},
		{name: "bad refresh interval", args: []string{"mkfs", url, "--index", "esfs-never-made", "--refresh-interval", "5"}, code: 2, want: []string{`--refresh-interval "5"`, "1s"}},
		{name: "password file missing", args: []string{"status", url, "--es-password-file", "/nonexistent/pw"}, code: 1,
			want: []string{"--es-password-file /nonexistent/pw: cannot read the file: no such file or directory"}, avoid: []string{"ESFS_ES_PASSWORD_FILE"}},
		{name: "password file missing, from the environment", args: []string{"status", url}, env: []string{"ESFS_ES_PASSWORD_FILE=/nonexistent/pw"}, code: 1,
			want: []string{"ESFS_ES_PASSWORD_FILE (--es-password-file) /nonexistent/pw: cannot read the file"}},
		{name: "API key file empty", args: []string{"status", url, "--es-api-key-file", emptyFile}, code: 1,
			want: []string{"--es-api-key-file " + emptyFile + ": the file is empty"}},
		{name: "API key file a directory", args: []string{"status", url, "--es-api-key-file", dir}, code: 1,
			want: []string{"--es-api-key-file " + dir + ": cannot read the file: is a directory"}},
		{name: "CA file missing, from the environment", args: []string{"status", url}, env: []string{"ESFS_ES_CA_CERT=/nonexistent/ca.pem"}, code: 1,
			want: []string{"ESFS_ES_CA_CERT (--es-ca-cert) /nonexistent/ca.pem: cannot read the file: no such file or directory"}},
		{name: "profiles without a metrics address", args: []string{"mount", "--pprof", dir}, code: 2,
			want: []string{"--pprof needs --metrics-addr: the profiles are served there"}},
		{name: "log file in a missing directory", args: []string{"mount", "--daemon", "--log-file", "/nonexistent/esfs.log", dir}, code: 1,
			want: []string{"--log-file /nonexistent/esfs.log: cannot open it for appending: no such file or directory"}},
		{name: "host name that does not resolve", args: []string{"mount", "--index", "esfs-never-made", dir}, env: []string{"ELASTICSEARCH_URL=http://nosuchhost.invalid:9200"}, code: 1,
			want: []string{"cannot find Elasticsearch at http://nosuchhost.invalid:9200", "host name does not resolve: nosuchhost.invalid"}, avoid: []string{"is it running"}},
		{name: "completion without a shell", args: []string{"completion"}, code: 2, want: []string{"bash, zsh or fish"}},
		{name: "completion for another shell", args: []string{"completion", "tcsh"}, code: 2, want: []string{"completion tcsh: want bash, zsh or fish"}},
	})
	if mounttest.IsMounted(dir) {
		t.Fatal("a refused mount left a mount behind")
	}
}

// TestCLISearchMount: esfs search --mount refuses a directory that is not
// where the filesystem is mounted, saying what it is, and prints paths
// under the mount point when it is.
func TestCLISearchMount(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	if err := os.WriteFile(m.Path("needle.txt"), []byte("hay\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Sync(t)
	plain := t.TempDir()
	url := "--es-url=" + f.URL
	runOneLineCases(t, []oneLineCase{
		{name: "not a mount point", args: []string{"search", url, "--index", f.Index, "--name", "needle.txt", "--mount", plain}, code: 2,
			want: []string{"--mount " + plain + " is not a mount point: give where filesystem " + f.Index + " is mounted"}},
		{name: "missing", args: []string{"search", url, "--index", f.Index, "--name", "x", "--mount", "/nonexistent/esfs"}, code: 2,
			want: []string{"--mount /nonexistent/esfs: no such file or directory"}},
		{name: "another filesystem type", args: []string{"search", url, "--index", f.Index, "--name", "x", "--mount", "/proc"}, code: 2,
			want: []string{"--mount /proc is a proc mount (source proc), not esfs"}},
		{name: "esfs mount of another index", args: []string{"search", url, "--index", "esfs-other", "--name", "x", "--mount", m.Dir}, code: 2,
			want: []string{"--mount " + m.Dir + " is where filesystem " + f.Index + " is mounted, not esfs-other (--index " + f.Index}},
	})
	out, code := mounttest.RunOn(t, f, "", "search", "--name", "needle.txt", "--mount", m.Dir)
	if code != 0 || strings.TrimSpace(out) != m.Path("needle.txt") {
		t.Errorf("search --mount of the right mount: status %d, output %q, want %q", code, out, m.Path("needle.txt"))
	}
}

// TestMountDashO: esfs mount -o ro,allow_other,... mounts as mount(8)
// would: read-only enforced by the kernel (EROFS), allow_other given to
// it, mount(8)'s own options ignored; flags after the mount point too.
func TestMountDashO(t *testing.T) {
	f := mounttest.NewFS(t)
	rw := f.Mount(t)
	if err := os.WriteFile(rw.Path("f"), []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rw.Sync(t)
	ro := f.Mount(t, "-o", "ro,allow_other,noatime,_netdev,x-systemd.automount,lease=5s")
	if opts := superOptions(t, ro.Dir); !hasOption(opts, "ro") || !hasOption(opts, "allow_other") {
		t.Errorf("mount table's options for %s: %q, want ro and allow_other", ro.Dir, opts)
	}
	if data, err := os.ReadFile(ro.Path("f")); err != nil || string(data) != "before\n" {
		t.Errorf("reading through the -o ro mount: %q, %v", data, err)
	}
	for what, err := range map[string]error{
		"create": os.WriteFile(ro.Path("g"), nil, 0o644),
		"mkdir":  os.Mkdir(ro.Path("d"), 0o755),
		"remove": os.Remove(ro.Path("f")),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s on a -o ro mount: %v, want EROFS", what, err)
		}
	}
	if fh, err := os.OpenFile(ro.Path("f"), os.O_WRONLY, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("open for writing on a -o ro mount: %v, want EROFS", err)
		if fh != nil {
			fh.Close()
		}
	}
	ro.Unmount(t)

	// As mount(8) users type it, the options after the mount point, and
	// with --daemon: the re-executed daemon takes them again.
	dir := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "esfs.log")
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{"mount", "--es-url", f.URL, "--index", f.Index, "--daemon", "--log-file", logFile, dir, "-o", "ro"},
		Env: []string{"ELASTICSEARCH_URL="}, Limit: 60 * time.Second})
	pid, conn, _ := daemonMounted(t, r.Out, r.Code, dir)
	if err := os.WriteFile(filepath.Join(dir, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create on a daemon mounted with -o ro: %v, want EROFS", err)
	}
	if r := mounttest.Run(t, mounttest.Cmd{Args: []string{"umount", dir}, Limit: 60 * time.Second}); r.Code != 0 {
		t.Fatalf("esfs umount: %d\n%s", r.Code, r.Out)
	}
	mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
}

// superOptions are the mount's superblock options in /proc/self/mountinfo
// (the last field), where FUSE lists ro and allow_other.
func superOptions(t *testing.T, dir string) string {
	t.Helper()
	fh, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	opts := ""
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 5 && fields[4] == dir {
			opts = fields[len(fields)-1]
		}
	}
	return opts
}

func hasOption(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}

// TestCLICompletionAndMan: the bash script, sourced in a real bash,
// registers its function for esfs and completes commands and flags by
// asking esfs; the zsh and fish scripts parse (and complete, in fish)
// when those shells are installed; esfs man renders with man -l.
func TestCLICompletionAndMan(t *testing.T) {
	bin, err := filepath.Abs(mounttest.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	// The scripts run esfs by name, as the user typed it.
	path := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(path, "esfs")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+path+":"+os.Getenv("PATH"))
	shell := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return string(out)
	}

	out := shell("bash", "-c", `set -e
source <(esfs completion bash)
complete -p esfs
COMP_WORDS=(esfs mo); COMP_CWORD=1; _esfs_complete; echo "commands: ${COMPREPLY[*]}"
COMP_WORDS=(esfs mount --attr); COMP_CWORD=2; _esfs_complete; echo "flags: ${COMPREPLY[*]}"
COMP_WORDS=(esfs search foo --un); COMP_CWORD=3; _esfs_complete; echo "after an argument: ${COMPREPLY[*]}"
COMP_WORDS=(esfs completion ""); COMP_CWORD=2; _esfs_complete; echo "shells: ${COMPREPLY[*]}"`)
	for _, want := range []string{"complete -o bashdefault -o default -F _esfs_complete esfs", "commands: mount\n",
		"flags: --attr-timeout\n", "after an argument: --under\n", "shells: bash zsh fish\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("bash completion: output lacks %q:\n%s", want, out)
		}
	}

	for _, sh := range []string{"zsh", "fish"} {
		if _, err := exec.LookPath(sh); err != nil {
			t.Logf("%s is not installed: its completion script is not checked", sh)
			continue
		}
		script := filepath.Join(t.TempDir(), "esfs."+sh)
		if err := os.WriteFile(script, []byte(shell(bin, "completion", sh)), 0o644); err != nil {
			t.Fatal(err)
		}
		shell(sh, "-n", script)
		switch sh {
		case "zsh":
			if out := shell("zsh", "-f", "-c", `autoload -U compinit && compinit -u -D && source `+script+` && print -r -- "$_comps[esfs]"`); strings.TrimSpace(out) != "_esfs" {
				t.Errorf("zsh: esfs's completion function is %q, want _esfs", out)
			}
		case "fish":
			if out := shell("fish", "--no-config", "-c", "source "+script+"; complete -C 'esfs mo'; complete -C 'esfs mount --attr'"); !strings.Contains(out, "mount\t") || !strings.Contains(out, "--attr-timeout\t") {
				t.Errorf("fish completion of 'esfs mo' and 'esfs mount --attr':\n%s", out)
			}
		}
	}

	page := shell(bin, "man")
	if !strings.HasPrefix(page, ".nh\n.TH esfs 1") || !strings.Contains(page, "attr-timeout") {
		t.Fatalf("esfs man is not a roff page of esfs(1):\n%.400s", page)
	}
	if _, err := exec.LookPath("man"); err != nil {
		t.Log("man is not installed: the page is not rendered")
		return
	}
	cmd := exec.Command("man", "-l", "-")
	cmd.Stdin = strings.NewReader(page)
	cmd.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=100")
	rendered, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("man -l -: %v\n%s", err, rendered)
	}
	for _, want := range []string{"NAME", "esfs - a POSIX filesystem stored in Elasticsearch", "DESCRIPTION", "remount", "COMMANDS", "--attr-timeout"} {
		if !strings.Contains(string(rendered), want) {
			t.Errorf("man -l - lacks %q:\n%.2000s", want, rendered)
		}
	}
	if strings.Contains(string(rendered), "\n.") {
		t.Errorf("man -l - left roff requests unrendered:\n%.2000s", rendered)
	}
}

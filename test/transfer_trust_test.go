package test

// esfs import and export run as root against a local tree, or into a
// local directory, that another user owns and changes while they run; and
// which extended attributes they copy.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// swapTries is how many imports and how many exports run against the
// swapper (ESFS_TEST_SWAP_TRIES sets it, for a longer run): two, as the
// code before the fix (d72fb5c) was caught by the first of each on every
// run here.
func swapTries(t *testing.T) int {
	if s := os.Getenv("ESFS_TEST_SWAP_TRIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("ESFS_TEST_SWAP_TRIES=%q", s)
		}
		return n
	}
	return 2
}

// TestTransferSymlinkSwaps: esfs import, run as root on a tree that uid
// 65534 owns, while that user swaps (atomically, in a loop) its files for
// symlinks to a file only root may read and its directories for symlinks
// to a directory only root may read, never opens anything outside the
// tree (inotify watches the root-only file and directory) and never
// stores a byte of the root-only file (the data index is searched); esfs
// export, run as root into a directory uid 65534 owns while that user
// swaps the new directory for a symlink to a directory only root may
// write, never touches that directory. Each run either succeeds or fails
// naming the entry that was replaced; one that succeeds under the swaps
// copied what it was given.
func TestTransferSymlinkSwaps(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	swapper := buildTestProgram(t, "swapper")
	pub := publicDir(t, "transfer-swaps")
	tries := swapTries(t)

	t.Run("import", func(t *testing.T) {
		secretDir := filepath.Join(pub, "secret")
		key := filepath.Join(secretDir, "key")
		secret := fmt.Sprintf("SECRET-%016x-only-root-may-read-this\n", rand.Uint64())
		if err := os.Mkdir(secretDir, 0o700); err != nil {
			t.Fatal(err)
		}
		mounttest.WriteFileMode(t, key, []byte(secret), 0o600)

		// The tree: files and directories, each beside a symlink to the
		// secret of its kind that the swapper puts in its place.
		tree := filepath.Join(pub, "tree")
		var pairs []string
		var script strings.Builder
		script.WriteString("mkdir tree && cd tree\n")
		for i := 0; i < 16; i++ {
			fmt.Fprintf(&script, "printf 'public file %02d, as long as the secret is: 0123456789abcdef\\n' > f%02d && ln -s %s f%02d.alt\n", i, i, key, i)
			pairs = append(pairs, fmt.Sprintf("f%02d:f%02d.alt", i, i))
		}
		for i := 0; i < 8; i++ {
			fmt.Fprintf(&script, "mkdir d%d && echo public > d%d/key && ln -s %s d%d.alt\n", i, i, secretDir, i)
			pairs = append(pairs, fmt.Sprintf("d%d:d%d.alt", i, i))
		}
		script.WriteString("cd .. && chown -hR 65534:65534 tree\n")
		mounttest.Sh(t, pub, script.String())

		watch := watchUntouched(t, secretDir, key)
		stop := startSwapper(t, swapper, []string{"-pause", "200us"}, tree, pairs...)
		var done, refused int
		for i := 0; i < tries; i++ {
			out, code := mounttest.RunOn(t, f, "", "import", "--quiet", tree, fmt.Sprintf("/imp%d", i))
			switch {
			case code == 0:
				done++
			case code == 1 && (strings.Contains(out, "replaced during the import") || strings.Contains(out, "changed during the import")):
				refused++
				if i == 0 {
					t.Logf("import refused: %s", strings.TrimSpace(out))
				}
			default:
				t.Errorf("import %d under the swaps: status %d\n%s", i, code, out)
			}
		}
		swaps := stop()
		t.Logf("%d imports: %d done, %d refused for an entry replaced; %d swaps meanwhile", tries, done, refused, swaps)
		if ev := watch(); len(ev) > 0 {
			t.Errorf("import opened or read root's files outside the tree it was given (inotify): %s", strings.Join(ev, "; "))
		}
		if leaks := chunksHolding(t, f, []byte(secret[:24])); len(leaks) > 0 {
			t.Errorf("the root-only file's bytes are in the filesystem: %s", strings.Join(leaks, "; "))
		}
		if swaps == 0 {
			t.Errorf("the swapper swapped nothing")
		}
	})

	t.Run("export", func(t *testing.T) {
		// What is exported: a tree imported without swaps, whose first
		// entries (in path order, as export makes them) are directories:
		// what follows the swapped name there makes them in root's. It has
		// more directories than export keeps open (128), so that it opens
		// some again, from their parents, to fill and finish them.
		src := filepath.Join(t.TempDir(), "src")
		mounttest.Sh(t, filepath.Dir(src), `mkdir src && cd src && mkdir a0{0..9} a1{0..9} b{000..150} && mkdir -p c/1/2/3/4 && echo deep > c/1/2/3/4/f &&
for d in 1 2 3 4; do mkdir -m 0777 d$d && for i in 1 2 3 4 5 6; do echo $d$i > d$d/f$i; done; ln -s f1 d$d/l; done && ln c/1/2/3/4/f d4/hard`)
		if out, code := mounttest.RunOn(t, f, "", "import", "--quiet", src, "/exp"); code != 0 {
			t.Fatalf("import: %d\n%s", code, out)
		}
		plain := filepath.Join(t.TempDir(), "plain")
		if out, code := mounttest.RunOn(t, f, "", "export", "--quiet", "/exp", plain); code != 0 {
			t.Fatalf("export: %d\n%s", code, out)
		}
		sameTree(t, src, plain, false)
		// The destination's directory is the other user's; beside it, a
		// directory of root's alone.
		home := filepath.Join(pub, "home")
		outside := filepath.Join(pub, "outside")
		mounttest.Sh(t, pub, `mkdir home outside && chown 65534:65534 home && chmod 0700 outside && echo keep > outside/keep`)
		const list = `find outside -printf '%p %M %u %s %T@\n' | sort`
		before := mounttest.Sh(t, pub, list)
		watch := watchUntouched(t, outside, filepath.Join(outside, "keep"))
		var done, refused int
		var swaps int64
		for i := 0; i < tries; i++ {
			name := fmt.Sprintf("copy%d", i)
			if err := os.Symlink(outside, filepath.Join(home, name+".alt")); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(filepath.Join(home, name+".alt"), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			stop := startSwapper(t, swapper, []string{"-once"}, home, name+":"+name+".alt")
			out, code := mounttest.RunOn(t, f, "", "export", "--quiet", "/exp", filepath.Join(home, name))
			swaps += stop()
			switch {
			case code == 0:
				done++
				// Under one name or the other, whole.
				got := filepath.Join(home, name)
				if fi, err := os.Lstat(got); err == nil && fi.Mode()&os.ModeSymlink != 0 {
					got += ".alt"
				}
				if out, err := exec.Command("diff", "-r", "--no-dereference", src, got).CombinedOutput(); err != nil {
					t.Errorf("export %d under the swaps copied something else: %v\n%s", i, err, out)
				}
			case code == 1 && strings.Contains(out, "replaced during the export"):
				refused++
				if i == 0 {
					t.Logf("export refused: %s", strings.TrimSpace(out))
				}
			default:
				t.Errorf("export %d under the swaps: status %d\n%s", i, code, out)
			}
		}
		t.Logf("%d exports: %d done, %d refused for a name replaced; %d swaps meanwhile", tries, done, refused, swaps)
		if ev := watch(); len(ev) > 0 {
			t.Errorf("export changed or opened root's directory outside the destination (inotify): %s", strings.Join(ev, "; "))
		}
		if after := mounttest.Sh(t, pub, list); after != before {
			t.Errorf("root's directory outside the destination changed:\n%s\nwas\n%s", after, before)
		}
	})
}

// TestTransferXattrNamespaces: import and export copy the user.* and
// trusted.* extended attributes of files, directories and symlinks; the
// others (security.*: a file capability among them; system.*: ACLs) only
// with --all-xattrs, and without it one warning counts them: an export as
// root of an index that holds a file capability does not set it. A mount
// neither lists nor serves those.
func TestTransferXattrNamespaces(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "src")
	mounttest.Sh(t, filepath.Dir(src), `mkdir src && cd src && echo data > f && chmod 0644 f && mkdir d && ln -s f l`)
	// A file capability (struct vfs_cap_data, revision 2, effective:
	// CAP_NET_BIND_SERVICE) and an ACL (user 1234 may read).
	capability := binary.LittleEndian.AppendUint32(nil, 0x02000001)
	capability = binary.LittleEndian.AppendUint32(capability, 1<<10)
	capability = append(capability, make([]byte, 12)...)
	var acl []byte
	acl = binary.LittleEndian.AppendUint32(acl, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 6, ^uint32(0)}, {0x02, 4, 1234}, {0x04, 4, ^uint32(0)}, {0x10, 4, ^uint32(0)}, {0x20, 4, ^uint32(0)}} {
		acl = binary.LittleEndian.AppendUint16(acl, e.tag)
		acl = binary.LittleEndian.AppendUint16(acl, e.perm)
		acl = binary.LittleEndian.AppendUint32(acl, e.id)
	}
	all := map[string]map[string][]byte{
		"f": {"user.a": []byte("1"), "trusted.b": []byte("2"), "security.esfs-test": []byte("3"), "security.capability": capability, "system.posix_acl_access": acl},
		"d": {"user.d": []byte("4"), "system.posix_acl_default": acl},
		"l": {"trusted.l": []byte("5")},
	}
	for name, xs := range all {
		for k, v := range xs {
			if err := unix.Lsetxattr(filepath.Join(src, name), k, v, 0); err != nil {
				t.Skipf("the local filesystem does not take %s on %s: %v", k, name, err)
			}
		}
	}
	// What the kernel gives back (it may normalize), and the default:
	// user.* and trusted.* only.
	all = localTreeXattrs(t, src)
	defaults := map[string]map[string][]byte{}
	for name, xs := range all {
		defaults[name] = map[string][]byte{}
		for k, v := range xs {
			if strings.HasPrefix(k, "user.") || strings.HasPrefix(k, "trusted.") {
				defaults[name][k] = v
			}
		}
	}
	const warning = "4 extended attributes outside user.* and trusted.* not copied (security.* 2, system.* 2); --all-xattrs copies them"
	stored := func(dir string) map[string]map[string][]byte {
		t.Helper()
		got := map[string]map[string][]byte{}
		for name := range all {
			d, err := f.Store.GetDentry(ctx, dir+"/"+name)
			if err != nil {
				t.Fatal(err)
			}
			a, err := f.Store.GetInode(ctx, d.Ino)
			if err != nil {
				t.Fatal(err)
			}
			got[name] = a.Xattrs
		}
		return got
	}
	same := func(what string, got, want map[string]map[string][]byte) {
		t.Helper()
		for name := range all {
			if !sameXattrs(got[name], want[name]) {
				t.Errorf("%s: %s has %s, want %s", what, name, xattrString(got[name]), xattrString(want[name]))
			}
		}
	}

	out, code := mounttest.RunOn(t, f, "", "import", "--quiet", src, "/dflt")
	if code != 0 || !strings.Contains(out, "esfs import: "+warning) {
		t.Errorf("import: status %d, want 0 and the warning %q:\n%s", code, warning, out)
	}
	same("import", stored("/dflt"), defaults)
	out, code = mounttest.RunOn(t, f, "", "import", "--quiet", "--all-xattrs", src, "/all")
	if code != 0 || strings.Contains(out, "not copied") {
		t.Errorf("import --all-xattrs: status %d, want 0 and no warning:\n%s", code, out)
	} else {
		same("import --all-xattrs", stored("/all"), all)
	}

	// An index that holds them all (written straight into it, as a
	// hostile or damaged index may hold anything).
	if out, code := mounttest.RunOn(t, f, "", "import", "--quiet", src, "/held"); code != 0 {
		t.Fatalf("import: %d\n%s", code, out)
	}
	for name, xs := range all {
		d, err := f.Store.GetDentry(ctx, "/held/"+name)
		if err != nil {
			t.Fatal(err)
		}
		a, err := f.Store.GetInode(ctx, d.Ino)
		if err != nil {
			t.Fatal(err)
		}
		a.Xattrs = xs
		if _, err := f.Store.Write(ctx, store.PutInode(a, a.Ver)); err != nil {
			t.Fatal(err)
		}
	}
	// Export as root: by default user.* and trusted.* (no file
	// capability set from the index), all of them with the flag.
	dst := filepath.Join(t.TempDir(), "dflt")
	out, code = mounttest.RunOn(t, f, "", "export", "--quiet", "/held", dst)
	if code != 0 || !strings.Contains(out, "esfs export: "+warning) {
		t.Errorf("export: status %d, want 0 and the warning %q:\n%s", code, warning, out)
	}
	same("export", localTreeXattrs(t, dst), defaults)
	dst = filepath.Join(t.TempDir(), "all")
	out, code = mounttest.RunOn(t, f, "", "export", "--quiet", "--all-xattrs", "/held", dst)
	if code != 0 || strings.Contains(out, "not copied") {
		t.Errorf("export --all-xattrs: status %d, want 0 and no warning:\n%s", code, out)
	} else {
		same("export --all-xattrs", localTreeXattrs(t, dst), all)
	}

	// What a mount lists and serves: user.* and trusted.* (to root).
	m := f.Mount(t)
	names, err := mountXattrNames(m.Path("held", "f"))
	if err != nil || !slices.Equal(names, []string{"trusted.b", "user.a"}) {
		t.Errorf("listxattr on a mount of a file whose inode holds security.* and system.* attributes: %q %v, want trusted.b and user.a", names, err)
	}
	if _, err := unix.Getxattr(m.Path("held", "f"), "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("getxattr security.capability on the mount: %v, want ENODATA", err)
	}
}

// localTreeXattrs reads the extended attributes of the entries of a
// local tree (not following symlinks), by name.
func localTreeXattrs(t *testing.T, dir string) map[string]map[string][]byte {
	t.Helper()
	got := map[string]map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		got[e.Name()] = localXattrs(t, filepath.Join(dir, e.Name()))
	}
	return got
}

// buildTestProgram builds the helper ./test/NAME where other users can
// run it.
func buildTestProgram(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(publicDir(t, name), name)
	cmd := exec.Command("go", "build", "-o", bin, "./test/"+name)
	cmd.Dir = mounttest.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	return bin
}

// startSwapper runs the swapper as uid 65534 on pairs of names in dir,
// and returns once it swaps. The function it returns stops it and says
// how many swaps it made.
func startSwapper(t *testing.T, bin string, flags []string, dir string, pairs ...string) (stop func() int64) {
	t.Helper()
	args := append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, flags...)
	cmd := exec.Command("setpriv", append(append(args, dir), pairs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); line != "swapping\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("swapper: %q %v\n%s", line, err, stderr.String())
	}
	stopped := false
	stop = func() int64 {
		if stopped {
			return 0
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		rest, _ := io.ReadAll(r)
		if err := cmd.Wait(); err != nil {
			t.Errorf("swapper: %v\n%s", err, stderr.String())
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(rest)), 10, 64)
		return n
	}
	t.Cleanup(func() { stop() })
	return stop
}

// watchUntouched watches paths with inotify from now on; the function it
// returns lists what anyone did to them since (an open, a read, a write,
// a change of attributes, an entry made or removed in a directory).
func watchUntouched(t *testing.T, paths ...string) func() []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	watched := map[int32]string{}
	for _, p := range paths {
		wd, err := unix.InotifyAddWatch(fd, p, unix.IN_ALL_EVENTS)
		if err != nil {
			t.Fatal(err)
		}
		watched[int32(wd)] = p
	}
	names := []struct {
		mask uint32
		name string
	}{{unix.IN_ACCESS, "read"}, {unix.IN_MODIFY, "write"}, {unix.IN_ATTRIB, "attributes changed"}, {unix.IN_OPEN, "open"},
		{unix.IN_CREATE, "created"}, {unix.IN_DELETE, "removed"}, {unix.IN_MOVED_FROM, "moved from"}, {unix.IN_MOVED_TO, "moved to"}}
	return func() []string {
		var events []string
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				return events
			}
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				wd := int32(binary.NativeEndian.Uint32(buf[off:]))
				mask := binary.NativeEndian.Uint32(buf[off+4:])
				l := int(binary.NativeEndian.Uint32(buf[off+12:]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+l]), "\x00")
				off += unix.SizeofInotifyEvent + l
				for _, e := range names {
					if mask&e.mask != 0 {
						events = append(events, fmt.Sprintf("%s: %s", filepath.Join(watched[wd], name), e.name))
					}
				}
			}
			if len(events) > 20 {
				return append(events[:20], "...")
			}
		}
	}
}

// chunksHolding searches every data chunk of f for b, and names the
// chunks that hold it.
func chunksHolding(t *testing.T, f *mounttest.FS, b []byte) []string {
	t.Helper()
	idx := f.Index + "-data"
	mounttest.ESRequest(t, f.URL, "POST", "/"+idx+"/_refresh", "")
	var res struct {
		Hits struct {
			Total struct{ Value int }
			Hits  []struct {
				ID     string `json:"_id"`
				Source struct {
					Text *string // a chunk of text
					Data []byte  // any other, in base64
				} `json:"_source"`
			}
		}
	}
	body := mounttest.ESRequest(t, f.URL, "POST", "/"+idx+"/_search?size=10000&track_total_hits=true", `{"query":{"match_all":{}}}`)
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if res.Hits.Total.Value > len(res.Hits.Hits) {
		t.Fatalf("%d chunks, more than one search returns", res.Hits.Total.Value)
	}
	var found []string
	for _, h := range res.Hits.Hits {
		data := h.Source.Data
		if h.Source.Text != nil {
			data = []byte(*h.Source.Text)
		}
		if bytes.Contains(data, b) {
			found = append(found, fmt.Sprintf("chunk %s: %q", h.ID, data))
		}
	}
	t.Logf("searched %d chunks", len(res.Hits.Hits))
	return found
}

// localXattrs reads every extended attribute of a local path (not
// following a symlink).
func localXattrs(t *testing.T, p string) map[string][]byte {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		k, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = v[:k]
	}
	return out
}

func mountXattrNames(p string) ([]string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func sameXattrs(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func xattrString(x map[string][]byte) string {
	keys := make([]string, 0, len(x))
	for k := range x {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q ", k, x[k])
	}
	return "{" + strings.TrimSpace(b.String()) + "}"
}

package test

// Nudges (locking/nudge.go): a mount that recalls another's delegation, or
// releases a lock another waits for, tells it with a datagram instead of
// leaving it to its next poll. A nudge only moves a poll forward, so these
// tests check both sides: mounts that meet in a directory send and take
// them (counted in esfs_nudges_total), the answers are the same with them
// off, and a nudge without the mount's token changes nothing.

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

func nudges(t *testing.T, metrics, kind, result string) float64 {
	return max(0, mounttest.Sample(mounttest.Scrape(t, metrics), "esfs_nudges_total", "kind", kind, "result", result))
}

// handoff passes files between a and b, rounds times: a makes directory
// d<r> and writes h in it, b reads it and writes g there, a reads that.
// Each read is of a file the other mount just made: every step recalls
// the other's delegation of the directory (a directory each round, so
// that none is recalled often enough to cool). It returns the rounds a
// second, for the log.
func handoff(t *testing.T, a, b *mounttest.Mount, rounds int) float64 {
	t.Helper()
	readOn := func(m *mounttest.Mount, d, name, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := os.ReadFile(m.Path(d, name))
			if err == nil && string(got) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s on %s: %q, %v; want %q", name, m.Dir, got, err, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	start := time.Now()
	for r := 0; r < rounds; r++ {
		d := fmt.Sprintf("d%d", r)
		if err := os.Mkdir(a.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		h, g := fmt.Sprintf("h%d", r), fmt.Sprintf("g%d", r)
		if err := os.WriteFile(a.Path(d, "h"), []byte(h), 0o644); err != nil {
			t.Fatal(err)
		}
		readOn(b, d, "h", h)
		if err := os.WriteFile(b.Path(d, "g"), []byte(g), 0o644); err != nil {
			t.Fatal(err)
		}
		readOn(a, d, "g", g)
	}
	return float64(rounds) / time.Since(start).Seconds()
}

// TestNudgesRecallAndWake: two mounts hand files back and forth, with
// nudges (the default) and without (--nudge-addr=off): with them the
// mount recalled takes recall nudges, and the recaller wakes; without
// them none is sent, and the files pass all the same.
func TestNudgesRecallAndWake(t *testing.T) {
	f := mounttest.NewFS(t)
	a, am := delegMount(t, f)
	b, bm := delegMount(t, f)
	rate := handoff(t, a, b, 20)
	// A is recalled every round (B reads the directory A just made,
	// born write-delegated to A); B only when it happens to hold a
	// delegation A's changes need (the root's, unless it cooled).
	if n := nudges(t, am, "recall", "received"); n < 1 {
		t.Errorf("A took %v recall nudges in 20 handoffs, want some", n)
	}
	for _, m := range []struct{ name, metrics string }{{"A", am}, {"B", bm}} {
		if n := nudges(t, m.metrics, "", "refused"); n != 0 {
			t.Errorf("%s refused %v nudges, none was forged", m.name, n)
		}
	}
	woken := nudges(t, am, "wake", "received") + nudges(t, bm, "wake", "received")
	if woken < 1 {
		t.Errorf("no mount was woken by a release in 20 handoffs")
	}
	t.Logf("with nudges: %.1f rounds/s; recall nudges taken A %v, B %v; wakes %v (sent A %v, B %v)", rate,
		nudges(t, am, "recall", "received"), nudges(t, bm, "recall", "received"), woken, nudges(t, am, "wake", "sent"), nudges(t, bm, "wake", "sent"))

	g := mounttest.NewFS(t)
	c, cm := delegMount(t, g, "--nudge-addr=off")
	e, em := delegMount(t, g, "--nudge-addr=off")
	rate = handoff(t, c, e, 20)
	for _, m := range []string{cm, em} {
		for _, kind := range []string{"recall", "wake"} {
			if n := nudges(t, m, kind, "sent") + nudges(t, m, kind, "received"); n != 0 {
				t.Errorf("with --nudge-addr=off a mount sent or took %v %s nudges", n, kind)
			}
		}
	}
	for _, s := range mounttest.Sessions(t, g) {
		if s.Nudge != "" {
			t.Errorf("session %s publishes %q with --nudge-addr=off", s.ID, s.Nudge)
		}
	}
	t.Logf("without nudges: %.1f rounds/s", rate)
}

// TestNudgesNeedTheToken: a nudge is taken only with the token the mount
// published in its session document; anything else is counted as refused
// and changes nothing.
func TestNudgesNeedTheToken(t *testing.T) {
	f := mounttest.NewFS(t)
	a, am := delegMount(t, f)
	pub := mounttest.Session(t, f, a).Nudge
	addr, token, ok := strings.Cut(pub, " ")
	if !ok || len(token) < 32 {
		t.Fatalf("the session publishes %q, want \"host:port token\"", pub)
	}
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(msg string) {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"esfs-nudge1 recall " + strings.Repeat("0", len(token)), "esfs-nudge1 recall", "esfs-nudge1 reboot " + token, "hello", ""} {
		send(bad)
	}
	mounttest.WaitFor(t, "4 refused nudges", 10*time.Second, func() bool { return nudges(t, am, "", "refused") >= 4 })
	send("esfs-nudge1 recall " + token)
	mounttest.WaitFor(t, "a recall nudge taken", 10*time.Second, func() bool { return nudges(t, am, "recall", "received") == 1 })
	if err := os.WriteFile(a.Path("f"), []byte("x"), 0o644); err != nil {
		t.Fatalf("the mount after the nudges: %v", err)
	}
}

package cmd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestDying: what the watchdog takes for a daemon's death in its
// /proc/PID/status, and what it does not: a stopped, sleeping or waiting
// daemon is alive.
func TestDying(t *testing.T) {
	status := func(state, sigPnd, shdPnd, core string) string {
		return "Name:\tesfs\nState:\t" + state + "\nTgid:\t7\nSigQ:\t0/1\nSigPnd:\t" + sigPnd +
			"\nShdPnd:\t" + shdPnd + "\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\tfffffffd7fc1feff\nCoreDumping:\t" + core + "\n"
	}
	const none, kill, term = "0000000000000000", "0000000000000100", "0000000000004000"
	for _, c := range []struct {
		name, status string
		dying        bool
	}{
		{"running", status("R (running)", none, none, "0"), false},
		{"sleeping", status("S (sleeping)", none, none, "0"), false},
		{"in the kernel", status("D (disk sleep)", none, none, "0"), false},
		{"stopped", status("T (stopped)", none, none, "0"), false},
		{"SIGTERM pending", status("S (sleeping)", none, term, "0"), false},
		{"main thread exited", status("Z (zombie)", none, none, "0"), true},
		{"SIGKILL pending on the main thread", status("D (disk sleep)", kill, none, "0"), true},
		{"SIGKILL pending for the process", status("D (disk sleep)", none, kill, "0"), true},
		{"dumping core", status("D (disk sleep)", none, none, "1"), true},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(c.status), 0o644); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		if why := dying(root); (why != "") != c.dying {
			t.Errorf("%s: dying says %q, want dying %v", c.name, why, c.dying)
		}
		root.Close()
	}

	// A real process: alive, stopped, then killed and reaped.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot("/proc/" + strconv.Itoa(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if why := dying(root); why != "" {
		t.Errorf("a sleeping process: dying says %q", why)
	}
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(50 * time.Millisecond)
	if why := dying(root); why != "" {
		t.Errorf("a stopped process: dying says %q", why)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if why := dying(root); why != "gone" {
		t.Errorf("a process reaped: dying says %q, want gone", why)
	}
}

package test

import (
	"bytes"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestSigtermWithOpenFiles: SIGTERM while a process has a file open with
// unflushed writes: the mount detaches at once, the open file keeps working
// until closed, then the daemon exits cleanly and nothing written is lost.
func TestSigtermWithOpenFiles(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	fh, err := os.Create(m.Path("open"))
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Repeat([]byte("a"), 1<<20+7)
	if _, err := fh.Write(first); err != nil {
		t.Fatal(err)
	}
	m.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for mounttest.IsMounted(m.Dir) {
		if time.Now().After(deadline) {
			t.Fatal("still mounted 30s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := m.WaitExit(500 * time.Millisecond); ok {
		t.Fatal("the daemon exited while a file was still open")
	}
	second := bytes.Repeat([]byte("b"), 4096)
	if _, err := fh.Write(second); err != nil {
		t.Fatalf("write after detach: %v", err)
	}
	if err := fh.Close(); err != nil {
		t.Fatalf("close after detach: %v", err)
	}
	err, ok := m.WaitExit(30 * time.Second)
	if !ok {
		t.Fatal("the daemon did not exit after the last file was closed")
	}
	if err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, m.Log())
	}
	m2 := f.Mount(t)
	got, err := os.ReadFile(m2.Path("open"))
	if err != nil || !bytes.Equal(got, append(first, second...)) {
		t.Fatalf("after remount: %d bytes, %v", len(got), err)
	}
}

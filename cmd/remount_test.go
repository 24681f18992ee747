package cmd

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestWithoutCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:9200":                           "http://127.0.0.1:9200",
		"https://elastic:hunter2@es:9200":                 "https://es:9200",
		"https://u:p@a:9200,https://b:9200,http://x@c:92": "https://a:9200,https://b:9200,http://c:92",
	} {
		if got := withoutCredentials(in); got != want {
			t.Errorf("withoutCredentials(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCurrentFlags: a remount starts from the flags the mount has, as the
// mount table shows them, strictatime being neither relatime nor noatime.
func TestCurrentFlags(t *testing.T) {
	for _, c := range []struct {
		mountOpts, superOpts string
		want                 uintptr
	}{
		{"rw,nosuid,nodev,relatime", "rw,user_id=0,group_id=0,default_permissions", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_RELATIME},
		{"ro,nosuid,nodev,noexec,noatime", "ro,user_id=0", unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME},
		{"rw,nodiratime", "rw,sync,lazytime", unix.MS_NODIRATIME | unix.MS_STRICTATIME | unix.MS_SYNCHRONOUS | unix.MS_LAZYTIME},
	} {
		if got := currentFlags(mounted{mountOpts: c.mountOpts, superOpts: c.superOpts}); got != c.want {
			t.Errorf("currentFlags(%s - %s) = %#x, want %#x", c.mountOpts, c.superOpts, got, c.want)
		}
	}
}

package store_test

import (
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// TestSpecialInodesRoundTrip: FIFOs, sockets and devices are inodes of
// their own type, and a device keeps its number.
func TestSpecialInodesRoundTrip(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	for i, n := range []store.Inode{
		{Type: store.TypeFifo, Mode: 0o640},
		{Type: store.TypeSocket, Mode: 0o777},
		{Type: store.TypeCharDev, Mode: 0o666, Rdev: 1<<8 | 3},                   // 1:3, /dev/null
		{Type: store.TypeBlockDev, Mode: 0o660, Rdev: 259<<8 | 0x12 | 0x345<<12}, // 259:0x3412
	} {
		n.Ino, n.Nlink = uint64(500+i), 1
		if _, err := s.Write(ctx, store.CreateInode(n)); err != nil {
			t.Fatalf("%s: %v", n.Type, err)
		}
		got, err := s.GetInode(ctx, n.Ino)
		if err != nil {
			t.Fatalf("%s: %v", n.Type, err)
		}
		if got.Type != n.Type || got.Mode != n.Mode || got.Rdev != n.Rdev {
			t.Errorf("%s: read back %s mode %o rdev %#x, want mode %o rdev %#x", n.Type, got.Type, got.Mode, got.Rdev, n.Mode, n.Rdev)
		}
		d := store.Dentry{Path: "/" + n.Type.String(), Ino: n.Ino, Type: n.Type}
		if _, err := s.Write(ctx, store.CreateDentry(d)); err != nil {
			t.Fatal(err)
		}
		if gd, err := s.GetDentry(ctx, d.Path); err != nil || gd.Type != n.Type {
			t.Errorf("path %s: %s, %v", d.Path, gd.Type, err)
		}
	}
}

// TestOpenUpgradesInodeMapping: an inode index made by an esfs without the
// rdev field gets it when the filesystem is opened, then takes devices;
// and its root, whose link count that esfs did not keep, is marked as not
// counted (1) rather than trusted.
func TestOpenUpgradesInodeMapping(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	_, props, err := store.RawMapping(s, ctx, "inodes")
	if err != nil {
		t.Fatal(err)
	}
	if props["rdev"] == nil {
		t.Fatal("mkfs made no rdev field")
	}
	delete(props, "rdev")
	if err := store.RawDeleteIndex(s, ctx, "inodes"); err != nil {
		t.Fatal(err)
	}
	err = store.RawCreateIndex(s, ctx, "inodes", map[string]any{"mappings": map[string]any{
		"dynamic": "strict", "_meta": map[string]any{"esfs_format": store.FormatVersion}, "properties": props}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Admin().AddWriteAliases(ctx); err != nil { // gone with the index deleted
		t.Fatal(err)
	}
	// The old root: 2 links whatever it held.
	if err := store.RawPut(s, ctx, "inodes", "1", map[string]any{"ino": 1, "type": "dir", "mode": 0o755, "nlink": 2}); err != nil {
		t.Fatal(err)
	}
	dev := store.Inode{Ino: 600, Type: store.TypeCharDev, Mode: 0o600, Nlink: 1, Rdev: 10<<8 | 200}
	if _, err := s.Write(ctx, store.CreateInode(dev)); err == nil {
		t.Fatal("the old mapping took an rdev: the test does not reproduce an older index")
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if _, props, _ = store.RawMapping(s, ctx, "inodes"); props["rdev"] == nil || props["rdev"]["type"] != "long" {
		t.Fatalf("after Open, rdev is %v, want a long", props["rdev"])
	}
	if _, err := s.Write(ctx, store.CreateInode(dev)); err != nil {
		t.Fatalf("a device after Open: %v", err)
	}
	if got, err := s.GetInode(ctx, dev.Ino); err != nil || got.Rdev != dev.Rdev {
		t.Fatalf("device read back: rdev %#x (%v), want %#x", got.Rdev, err, dev.Rdev)
	}
	root, err := s.GetInode(ctx, store.RootIno)
	if err != nil || root.Nlink != 1 || root.DirLinksCounted() {
		t.Fatalf("old root after Open: nlink %d (%v), want 1 (not counted)", root.Nlink, err)
	}
	// Once upgraded, opening again leaves counts alone.
	root.Nlink = 3
	if _, err := s.Write(ctx, store.PutInode(root, root.Ver)); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if root, err = s.GetInode(ctx, store.RootIno); err != nil || root.Nlink != 3 {
		t.Fatalf("root after a second Open: nlink %d (%v), want 3", root.Nlink, err)
	}
}

package store_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/esfs/esfs/store"
)

// TestDecodeChunkFast: the fast decoder of chunk documents agrees with
// encoding/json on what it accepts, and declines what it cannot read
// exactly (escapes, other forms), which then goes to encoding/json.
func TestDecodeChunkFast(t *testing.T) {
	bin := []byte{0, 1, 2, 250, 251, '"', '\\', 'x'}
	for _, c := range []struct {
		src  string
		fast bool
		want []byte
	}{
		{`{"ino":123,"chunk":4,"data":"` + base64.StdEncoding.EncodeToString(bin) + `"}`, true, bin},
		{`{"ino":123,"chunk":4,"data":""}`, true, []byte{}},
		{`{"ino":123,"chunk":4,"text":"plain words"}`, true, []byte("plain words")},
		{`{"ino":123,"chunk":4,"sess":"5f3d87f0","data":"AAEC"}`, true, []byte{0, 1, 2}},
		{`{"ino":123,"chunk":4,"sess":"5f3d87f0","text":"plain words"}`, true, []byte("plain words")},
		{`{"ino":123,"chunk":4,"sess":"a\"b","data":"AAEC"}`, false, []byte{0, 1, 2}},
		{`{"ino":123,"chunk":4,"text":"two\nlines \u003c"}`, false, []byte("two\nlines <")},
		{`{"chunk":4,"ino":123,"data":"AAEC"}`, false, []byte{0, 1, 2}},
		{`{"ino":123,"chunk":4,"data":"AAEC" }`, false, []byte{0, 1, 2}},
		{`{"ino":123,"chunk":4,"data":"!!!"}`, false, nil},
	} {
		got, ok := store.DecodeChunkFast([]byte(c.src))
		if ok != c.fast {
			t.Errorf("%s: fast %v, want %v", c.src, ok, c.fast)
			continue
		}
		if !ok {
			var v struct {
				Data []byte  `json:"data"`
				Text *string `json:"text"`
			}
			if err := json.Unmarshal([]byte(c.src), &v); err != nil {
				if c.want != nil {
					t.Errorf("%s: %v", c.src, err)
				}
				continue
			}
			if v.Text != nil {
				v.Data = []byte(*v.Text)
			}
			if !bytes.Equal(v.Data, c.want) {
				t.Errorf("%s: json reads %q, want %q", c.src, v.Data, c.want)
			}
			continue
		}
		if got.Ino != 123 || got.Chunk != 4 {
			t.Errorf("%s: ino %d chunk %d", c.src, got.Ino, got.Chunk)
		}
		data := got.Data
		if got.Text != nil {
			data = []byte(*got.Text)
		}
		if !bytes.Equal(data, c.want) {
			t.Errorf("%s: %q, want %q", c.src, data, c.want)
		}
	}
}

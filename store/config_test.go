package store

import "testing"

// TestConfigCredentials: what New sends, which a --daemon parent hands its
// daemon with the URLs bare.
func TestConfigCredentials(t *testing.T) {
	for _, c := range []struct {
		cfg                  Config
		user, password, akey string
	}{
		{Config{URLs: []string{"https://u:p%40ss@es:9200"}}, "u", "p@ss", ""},
		{Config{URLs: []string{"https://es:9200,https://u2:p2@es2:9200"}, APIKey: "k"}, "u2", "p2", "k"},
		{Config{URLs: []string{"https://u:p@es:9200"}, Username: "given"}, "given", "", ""},
		{Config{URLs: []string{"https://es:9200"}, Username: "given", Password: "pw"}, "given", "pw", ""},
		{Config{URLs: []string{"https://u@es:9200"}}, "u", "", ""},
	} {
		user, password, akey := c.cfg.Credentials()
		if user != c.user || password != c.password || akey != c.akey {
			t.Errorf("%+v: got %q %q %q, want %q %q %q", c.cfg, user, password, akey, c.user, c.password, c.akey)
		}
	}
}

package cmd

import (
	"reflect"
	"testing"
)

func TestDaemonArgs(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"esfs", "mount", "--daemon", "--es-url", "https://u:p@es:9200", "/mnt"},
			[]string{"mount", "--es-url", "https://es:9200", "/mnt"}},
		{[]string{"esfs", "mount", "-d", "--es-url=https://u:p@a:9200,http://u:p@b:9200", "/mnt"},
			[]string{"mount", "--es-url=https://a:9200,http://b:9200", "/mnt"}},
		{[]string{"mount.fuse.esfs", "mount", "--daemon", "--index", "fs", "-o", "ro,url=HTTPS://u:p@es:9200/,lease=2s", "/mnt"},
			[]string{"mount", "--index", "fs", "-o", "ro,url=HTTPS://es:9200/,lease=2s", "/mnt"}},
		// url.Parse takes the last @ before the path: so does the strip.
		{[]string{"esfs", "mount", "--daemon", "--es-url", "https://u:p@ss@es:9200/x@y", "/mnt"},
			[]string{"mount", "--es-url", "https://es:9200/x@y", "/mnt"}},
		{[]string{"esfs", "mount", "--daemon", "--es-url", "https://u@es:9200", "--", "/mnt/http://a:b@c"},
			[]string{"mount", "--es-url", "https://es:9200", "--", "/mnt/http://a:b@c"}},
	} {
		if got := daemonArgs(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("daemonArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDaemonEnviron(t *testing.T) {
	in := []string{"PATH=/bin", "ESFS_ES_PASSWORD=pw", "ESFS_ES_API_KEY=key", "ESFS_ES_USERNAME=u",
		"ELASTICSEARCH_URL=https://u:pw@es:9200", "ESFS_ES_URL=http://es:9200", daemonCredentialsEnv + "=4"}
	want := []string{"PATH=/bin", "ESFS_ES_USERNAME=u", "ELASTICSEARCH_URL=https://es:9200", "ESFS_ES_URL=http://es:9200"}
	if got := daemonEnviron(in); !reflect.DeepEqual(got, want) {
		t.Errorf("daemonEnviron = %q, want %q", got, want)
	}
}

func TestRefuseArgvPassword(t *testing.T) {
	for _, c := range []struct {
		args    []string
		refused bool
	}{
		{[]string{"esfs", "status", "--es-url", "https://u:p@es:9200"}, true},
		{[]string{"esfs", "mount", "-o", "ro,url=http://u:p@es", "/mnt"}, true},
		{[]string{"esfs", "mkfs", "--es-url=http://es:9200,https://u:p@es2:9200"}, true},
		{[]string{"esfs", "status", "--es-url", "https://u@es:9200"}, false}, // a user is no secret
		{[]string{"esfs", "status", "--es-url", "https://es:9200/a:b@c"}, false},
		{[]string{"esfs", "status", "--es-url", "http://es:9200,http://es2:9200"}, false},
		{[]string{"https://u:p@es:9200"}, false}, // the program's own name
	} {
		if err := refuseArgvPassword(c.args); (err != nil) != c.refused {
			t.Errorf("refuseArgvPassword(%q) = %v, want refused %v", c.args, err, c.refused)
		}
	}
}

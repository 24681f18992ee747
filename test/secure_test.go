package test

// A cluster with security on: TLS verified by CA or fingerprint, users and
// API keys, and secrets that never show in output or logs.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// secureCluster is the cluster with security on (TLS, users, API keys) that
// test/run.sh starts with `test/es.sh start --secure`.
type secureCluster struct {
	URL, User, Password, CACert string
}

// secureEnv returns the secured cluster under test. Without one the test
// fails, as every test here does without its cluster, unless the caller
// said explicitly that it does not want it.
func secureEnv(t *testing.T) secureCluster {
	t.Helper()
	sc := secureCluster{
		URL:      os.Getenv("ESFS_TEST_SECURE_URL"),
		User:     os.Getenv("ESFS_ES_USERNAME"),
		Password: os.Getenv("ESFS_ES_PASSWORD"),
		CACert:   os.Getenv("ESFS_ES_CA_CERT"),
	}
	if sc.URL == "" {
		if os.Getenv("ESFS_TEST_SKIP_SECURE") == "1" {
			t.Skip("ESFS_TEST_SKIP_SECURE=1: not testing against a secured cluster")
		}
		t.Fatal("ESFS_TEST_SECURE_URL is not set: run the suite with test/run.sh, which starts a secured cluster; " +
			`or: test/es.sh start --secure && eval "$(test/es.sh secure-env)" && export ESFS_TEST_SECURE_URL=$ELASTICSEARCH_URL; ` +
			"or set ESFS_TEST_SKIP_SECURE=1 to skip these tests")
	}
	if sc.User == "" || sc.Password == "" || sc.CACert == "" {
		t.Fatal("ESFS_TEST_SECURE_URL is set, but ESFS_ES_USERNAME, ESFS_ES_PASSWORD and ESFS_ES_CA_CERT are not all set " +
			`(they come from: eval "$(test/es.sh secure-env)")`)
	}
	return sc
}

// credVars are every variable through which esfs takes credentials or TLS
// settings. Each run below sets all of them, so that what the test process
// inherited (test/run.sh exports some) never leaks into a case.
var credVars = []string{
	"ESFS_ES_USERNAME", "ESFS_ES_PASSWORD", "ESFS_ES_PASSWORD_FILE",
	"ESFS_ES_API_KEY", "ESFS_ES_API_KEY_FILE",
	"ESFS_ES_CA_CERT", "ESFS_ES_FINGERPRINT", "ESFS_ES_INSECURE",
}

// esfsEnv is the environment of an esfs run: ours without any credential or
// cluster variable, plus exactly the given ones (KEY=value).
func esfsEnv(set ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ESFS_") || strings.HasPrefix(k, "ELASTICSEARCH_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, set...)
}

// overrides sets every credential variable, empty unless given, for use
// where a helper appends to os.Environ() (mounttest): the last value wins.
func overrides(set ...string) []string {
	var env []string
	for _, k := range credVars {
		env = append(env, k+"=")
	}
	return append(env, set...)
}

// TestSecureClusterCredentials: against a cluster with security on, every
// way in (user and password, API key, CA file, fingerprint) makes, mounts
// and reads the same filesystem, and every wrong credential or certificate
// fails in one line that names the problem and holds no secret.
func TestSecureClusterCredentials(t *testing.T) {
	sc := secureEnv(t)
	bin := mounttest.Binary(t)
	index := testenv.Prefix(t)

	admin, err := store.New(store.Config{URLs: []string{sc.URL}, Username: sc.User, Password: sc.Password,
		CACertFile: sc.CACert, Prefix: index, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.Admin().DeleteFilesystem(ctx); err != nil {
			t.Errorf("deleting test filesystem: %v", err)
		}
		admin.Close()
	})
	fsys := &mounttest.FS{URL: sc.URL, Index: index, Bin: bin, Store: admin}

	apiKey, apiKeySecret := createAPIKey(t, sc)
	fingerprint := nodeFingerprint(t, sc)
	otherCA := selfMadeCA(t)
	otherCAFingerprint := certFingerprint(t, otherCA)

	password := []string{"ESFS_ES_USERNAME=" + sc.User, "ESFS_ES_PASSWORD=" + sc.Password}
	withCA := []string{"ESFS_ES_CA_CERT=" + sc.CACert}
	// Whatever a failure prints must not hold any of these.
	secrets := []string{sc.Password, apiKey, apiKeySecret}

	// Each way in makes the filesystem (mkfs is idempotent), mounts it,
	// writes a file of its own and reads back all files written so far:
	// they are the same indices, whatever the credentials.
	var written []string
	works := []struct {
		name  string
		env   []string
		flags []string
	}{
		{"password and CA", append(append([]string{}, password...), withCA...), nil},
		{"API key and CA", append([]string{"ESFS_ES_API_KEY=" + apiKey}, withCA...), nil},
		{"password and fingerprint", password, []string{"--es-fingerprint", fingerprint}},
		{"API key and fingerprint with colons", []string{"ESFS_ES_API_KEY=" + apiKey}, []string{"--es-fingerprint", colons(fingerprint)}},
	}
	for i, w := range works {
		ok := t.Run("works with "+w.name, func(t *testing.T) {
			r := mounttest.Run(t, secureCmd(bin, esfsEnv(w.env...), append([]string{"mkfs", "--es-url", sc.URL, "--index", index}, w.flags...)...))
			if r.Err != nil {
				t.Fatalf("esfs mkfs: %v\n%s", r.Err, r.Out)
			}
			m := fsys.MountAt(t, t.TempDir(), overrides(w.env...), w.flags...)
			name := fmt.Sprintf("file-%d.txt", i)
			want := fmt.Sprintf("written %s\n", w.name)
			if err := os.WriteFile(m.Path(name), []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			written = append(written, name)
			for _, n := range written {
				got, err := os.ReadFile(m.Path(n))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(string(got), "written ") {
					t.Errorf("%s holds %q", n, got)
				}
				if n == name && string(got) != want {
					t.Errorf("%s: read back %q, wrote %q", n, got, want)
				}
			}
			m.Unmount(t)
		})
		if !ok && i == 0 {
			t.Fatal("the plain way in does not work; the failure cases would prove nothing")
		}
	}

	// An API key of the right shape whose secret is wrong (the id exists).
	id, _, _ := strings.Cut(decodeB64(t, apiKey), ":")
	wrongKey := base64.StdEncoding.EncodeToString([]byte(id + ":" + strings.Repeat("x", 22)))
	wrongPassword := "not-the-password-of-" + sc.User
	secrets = append(secrets, wrongKey)

	fails := []struct {
		name  string
		env   []string
		flags []string
		url   string
		want  string // regexp the one line must match: it names the problem
	}{
		// Elasticsearch does not tell an unknown user from a wrong password,
		// on purpose; esfs can only name the user it tried.
		{"wrong password", append([]string{"ESFS_ES_USERNAME=" + sc.User, "ESFS_ES_PASSWORD=" + wrongPassword}, withCA...), nil, "",
			`(?i)authenticat.*user "` + regexp.QuoteMeta(sc.User) + `"`},
		{"unknown user", append([]string{"ESFS_ES_USERNAME=esfs-no-such-user", "ESFS_ES_PASSWORD=" + sc.Password}, withCA...), nil, "",
			`(?i)authenticat.*user "esfs-no-such-user"`},
		{"wrong API key", append([]string{"ESFS_ES_API_KEY=" + wrongKey}, withCA...), nil, "",
			`(?i)authenticat.*API key`},
		{"no credentials", withCA, nil, "",
			`(?i)authenticat.*(without|missing) .*credentials`},
		{"no CA", password, nil, "",
			`(?i)TLS certificate.*unknown authority`},
		{"a wrong CA", append(append([]string{}, password...), "ESFS_ES_CA_CERT="+otherCA), nil, "",
			`(?i)TLS certificate.*unknown authority.*` + regexp.QuoteMeta(otherCA)},
		{"plain http to the https port", append(append([]string{}, password...), withCA...), nil, httpURL(t, sc.URL),
			`(?i)speaks HTTPS.*https://`},
		{"a fingerprint that does not match", password, []string{"--es-fingerprint", otherCAFingerprint}, "",
			`(?i)TLS certificate.*fingerprint`},
	}
	for _, f := range fails {
		t.Run("fails with "+f.name, func(t *testing.T) {
			u := sc.URL
			if f.url != "" {
				u = f.url
			}
			env := esfsEnv(f.env...)
			t.Run("mkfs", func(t *testing.T) {
				r := mounttest.Run(t, secureCmd(bin, env, append([]string{"mkfs", "--es-url", u, "--index", index}, f.flags...)...))
				checkFailure(t, r.Out, r.Err, f.want, secrets)
			})
			t.Run("mount", func(t *testing.T) {
				dir := t.TempDir()
				r := mounttest.Run(t, secureCmd(bin, env, append(append([]string{"mount", "--es-url", u, "--index", index}, f.flags...), dir)...))
				if mounttest.IsMounted(dir) {
					_ = syscall.Unmount(dir, syscall.MNT_DETACH)
					t.Fatalf("%s got mounted:\n%s", dir, r.Out)
				}
				checkFailure(t, r.Out, r.Err, f.want, secrets)
			})
		})
	}
}

// secureCmd runs the esfs binary with exactly env. A failure case must
// end within a few seconds: the process is killed after 30s (the caller
// then checks that nothing got mounted), and the test fails beyond 10s.
func secureCmd(bin string, env []string, args ...string) mounttest.Cmd {
	return mounttest.Cmd{Bin: bin, Args: args, Env: env, OnlyEnv: true, Limit: 30 * time.Second, MayHang: true, Slow: 10 * time.Second}
}

var stackTrace = regexp.MustCompile(`goroutine \d+|panic:|\.go:\d+`)

// checkFailure: a non-zero exit, one line of output that names the problem,
// and no secret, no stack trace in it.
func checkFailure(t *testing.T, out string, err error, want string, secrets []string) {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("want a non-zero exit status, got %v", err)
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(out, s) {
			t.Fatalf("output holds a secret (not shown here); %d bytes", len(out))
		}
	}
	line := strings.TrimSuffix(out, "\n")
	if line == "" || strings.Contains(line, "\n") {
		t.Errorf("want exactly one line of output, got %d:\n%s", strings.Count(out, "\n"), out)
	}
	if stackTrace.MatchString(out) {
		t.Errorf("output holds a stack trace:\n%s", out)
	}
	if !regexp.MustCompile(want).MatchString(line) {
		t.Errorf("output does not match %q:\n%s", want, out)
	}
	// The cluster is up in every case: a hint that it might not be sends
	// the user the wrong way.
	if strings.Contains(line, "is it running") {
		t.Errorf("output blames reachability for a configuration problem:\n%s", out)
	}
	t.Logf("%s", line)
}

// secureClient talks to the secured cluster, trusting its CA.
func secureClient(t *testing.T, sc secureCluster) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(sc.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("%s holds no PEM certificate", sc.CACert)
	}
	// No proxy: the cluster is on loopback.
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// createAPIKey makes an API key as the superuser through the API, and
// invalidates it when the test ends. It returns the encoded key (what
// ESFS_ES_API_KEY takes) and its secret part.
func createAPIKey(t *testing.T, sc secureCluster) (encoded, secret string) {
	t.Helper()
	var key struct {
		ID      string `json:"id"`
		APIKey  string `json:"api_key"`
		Encoded string `json:"encoded"`
	}
	body := superuserCall(t, sc, "POST", "/_security/api_key", `{"name":"esfs-secure-test","expiration":"1h"}`)
	if err := json.Unmarshal(body, &key); err != nil || key.Encoded == "" || key.APIKey == "" {
		t.Fatalf("POST /_security/api_key: no key in the answer (%v)", err)
	}
	t.Cleanup(func() {
		superuserCall(t, sc, "DELETE", "/_security/api_key", fmt.Sprintf(`{"ids":[%q]}`, key.ID))
	})
	return key.Encoded, key.APIKey
}

// nodeFingerprint is the hex SHA-256 of the certificate the node presents,
// read over a connection verified with the CA.
func nodeFingerprint(t *testing.T, sc secureCluster) string {
	t.Helper()
	u, err := url.Parse(sc.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := secureClient(t, sc).Transport.(*http.Transport)
	conn, err := tls.Dial("tcp", u.Host, tr.TLSClientConfig)
	if err != nil {
		t.Fatalf("TLS to %s with the CA: %v", u.Host, err)
	}
	defer conn.Close()
	sum := sha256.Sum256(conn.ConnectionState().PeerCertificates[0].Raw)
	return hex.EncodeToString(sum[:])
}

// selfMadeCA writes the PEM certificate of a fresh CA that signed nothing.
func selfMadeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "esfs test: some other CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// certFingerprint is the hex SHA-256 of the certificate in a PEM file.
func certFingerprint(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	sum := sha256.Sum256(block.Bytes)
	return hex.EncodeToString(sum[:])
}

// colons spells a hex fingerprint as openssl prints it: "AB:CD:...".
func colons(fp string) string {
	var b bytes.Buffer
	for i := 0; i < len(fp); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strings.ToUpper(fp[i : i+2]))
	}
	return b.String()
}

func decodeB64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("API key is not base64: %v", err)
	}
	return string(b)
}

// httpURL is the same node with the http scheme.
func httpURL(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" {
		t.Fatalf("ESFS_TEST_SECURE_URL %q: want an https:// URL", raw)
	}
	u.Scheme = "http"
	return u.String()
}

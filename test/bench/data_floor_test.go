package bench

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The data_floor group: how fast Elasticsearch itself takes and gives file
// data, written as esfs writes chunks (a bulk per few chunks, a few in
// flight, each waiting for the translog's fsync) in each form it accepts,
// into scratch indices made for the run: the floors the data path can
// choose from. Each variant writes the same incompressible
// bytes, then reads them back by _mget (JSON answers); the cluster's CPU
// time per MiB written says what the bytes cost it.
func benchDataFloor(s *suite) {
	t := s.t
	mib := 128
	if s.scale == "full" {
		mib = 512
	}
	data := make([]byte, mib<<20)
	if _, err := io.ReadFull(&prng{state: 2929}, data); err != nil {
		t.Fatal(err)
	}
	r := newRaw(t, "")
	type variant struct {
		name, what  string
		chunk       int  // bytes a document
		per, flight int  // documents a bulk, bulks in flight
		smile       bool // SMILE bulks, the bytes as raw binary
		mapping     string
		settings    string
	}
	const binary = `{"dynamic":"strict","properties":{"ino":{"type":"long"},"chunk":{"type":"long"},"data":{"type":"binary"}}}`
	const skipped = `{"dynamic":"strict","properties":{"ino":{"type":"long"},"chunk":{"type":"long"},"data":{"type":"object","enabled":false}}}`
	variants := []variant{
		{"json 1M", "base64 in JSON, a `binary` field (esfs today): 1 MiB chunks, 8 a bulk, 4 in flight", 1 << 20, 8, 4, false, binary, ""},
		{"json 1M ×8", "the same, 8 bulks in flight", 1 << 20, 8, 8, false, binary, ""},
		{"json 256K", "the same, 256 KiB chunks, 32 a bulk", 256 << 10, 32, 4, false, binary, ""},
		{"json 4M", "the same, 4 MiB chunks, 2 a bulk", 4 << 20, 2, 4, false, binary, ""},
		{"json 1M skipped", "base64 in JSON, under a disabled object (`enabled: false`: not parsed, only kept in _source)", 1 << 20, 8, 4, false, skipped, ""},
		{"json 1M best_compression", "base64 in JSON, `binary`, `index.codec: best_compression`", 1 << 20, 8, 4, false, binary, `"codec":"best_compression"`},
		{"json 1M refresh 30s", "base64 in JSON, `binary`, refreshed every 30 s instead of 1 s (fewer, larger segments to merge)", 1 << 20, 8, 4, false, binary, `"refresh_interval":"30s"`},
		{"json 1M 40 a tier", "base64 in JSON, `binary`, `index.merge.policy.segments_per_tier: 40` (fewer merges)", 1 << 20, 8, 4, false, binary, `"merge.policy.segments_per_tier":40`},
		{"smile 1M", "SMILE bulks, the bytes as 7-bit binary (8 bytes for 7) into a `binary` field", 1 << 20, 8, 4, true, binary, ""},
		{"smile 1M skipped", "SMILE bulks, 7-bit binary under a disabled object", 1 << 20, 8, 4, true, skipped, ""},
	}
	stamp := time.Now().UnixNano()
	for _, v := range variants {
		var writes, reads []time.Duration
		var cpu []float64
		for rep := 0; rep < s.reps; rep++ {
			index := fmt.Sprintf("esfs-bench-floor-%d-%s-%d", stamp, strings.NewReplacer(" ", "-", "×", "x").Replace(strings.ToLower(v.name)), rep)
			settings := `{"number_of_shards":1,"number_of_replicas":0,"refresh_interval":"1s"}`
			if v.settings != "" {
				settings = `{"number_of_shards":1,"number_of_replicas":0,` + v.settings + `}`
				if !strings.Contains(v.settings, "refresh_interval") {
					settings = strings.Replace(settings, "{", `{"refresh_interval":"1s",`, 1)
				}
			}
			r.do("PUT", "/"+index, []byte(`{"settings":{"index":`+settings+`},"mappings":`+v.mapping+`}`))
			bodies := floorBodies(index, data, v.chunk, v.per, v.smile)
			cpu0 := clusterCPU(r)
			start := time.Now()
			floorSend(r, bodies, v.flight, v.smile)
			writes = append(writes, time.Since(start))
			cpu = append(cpu, (clusterCPU(r)-cpu0).Seconds()*1000/float64(mib))
			n := (len(data) + v.chunk - 1) / v.chunk
			start = time.Now()
			got := r.readChunksOf(index, 1, n, max(1, (2<<20)/v.chunk), 4)
			reads = append(reads, time.Since(start))
			if got < len(data) {
				t.Fatalf("%s: read %d bytes of answers for %d of data", v.name, got, len(data))
			}
			r.do("DELETE", "/"+index, nil)
		}
		rate := func(ds []time.Duration) string {
			return fmt.Sprintf("%.0f MiB/s", float64(mib)/median(ds).Seconds())
		}
		s.add(row{name: "data_floor " + v.name, workload: fmt.Sprintf("%s; %d MiB written (each bulk waits for the translog's fsync), then read back by `_mget` of 2 MiB, 4 in flight", v.what, mib),
			absolute: fmt.Sprintf("write %s, read %s; cluster CPU %.1f ms a MiB written", rate(writes), rate(reads), medianF(cpu))})
	}
}

func medianF(xs []float64) float64 {
	c := append([]float64(nil), xs...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c[len(c)/2]
}

// clusterCPU is the CPU time the cluster's processes have used so far.
func clusterCPU(r *raw) time.Duration {
	var st struct {
		Nodes map[string]struct {
			Process struct {
				CPU struct {
					Total int64 `json:"total_in_millis"`
				} `json:"cpu"`
			} `json:"process"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(r.do("GET", "/_nodes/stats/process", nil), &st); err != nil {
		r.t.Fatal(err)
	}
	var total int64
	for _, n := range st.Nodes {
		total += n.Process.CPU.Total
	}
	return time.Duration(total) * time.Millisecond
}

// floorBodies are the bulk bodies that store data as chunk documents of
// size chunk, per a bulk: NDJSON with base64, or SMILE with raw binary.
func floorBodies(index string, data []byte, chunk, per int, smile bool) [][]byte {
	var bodies [][]byte
	var b bytes.Buffer
	n := 0
	for off, c := 0, 0; off < len(data); off, c = off+chunk, c+1 {
		end := min(off+chunk, len(data))
		id := fmt.Sprintf("1.%d", c)
		if smile {
			smileAction(&b, index, id)
			smileChunk(&b, 1, int64(c), data[off:end])
		} else {
			fmt.Fprintf(&b, `{"index":{"_index":%q,"_id":%q}}`+"\n", index, id)
			fmt.Fprintf(&b, `{"ino":1,"chunk":%d,"data":"%s"}`+"\n", c, base64.StdEncoding.EncodeToString(data[off:end]))
		}
		if n++; n == per {
			bodies = append(bodies, append([]byte(nil), b.Bytes()...))
			b.Reset()
			n = 0
		}
	}
	if b.Len() > 0 {
		bodies = append(bodies, b.Bytes())
	}
	return bodies
}

func floorSend(r *raw, bodies [][]byte, flight int, smile bool) {
	jobs := make(chan []byte)
	var wg sync.WaitGroup
	for w := 0; w < flight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for body := range jobs {
				if !smile {
					r.do("POST", "/_bulk", body)
					continue
				}
				req, _ := http.NewRequest("POST", r.url+"/_bulk", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/smile")
				req.Header.Set("Accept", "application/json")
				res, err := r.c.Do(req)
				if err != nil {
					r.t.Error(err)
					continue
				}
				out, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || bytes.Contains(out[:min(len(out), 64)], []byte(`"errors":true`)) {
					r.t.Errorf("SMILE bulk: %s %.400s", res.Status, out)
				}
			}
		}()
	}
	for _, b := range bodies {
		jobs <- b
	}
	close(jobs)
	wg.Wait()
}

// SMILE (Jackson's binary JSON, which Elasticsearch takes for _bulk):
// each line a document of its own, with the header, ended by 0xFF. Binary
// goes as 7-bit groups: raw binary may hold 0xFF, where Elasticsearch
// would cut the line.
const (
	smileStartObject = 0xFA
	smileEndObject   = 0xFB
	smile7BitBinary  = 0xE8
	smileEndOfDoc    = 0xFF
)

func smileHeader(b *bytes.Buffer) { b.Write([]byte{':', ')', '\n', 0}) }

// smile7Bit writes data as SMILE's 7-bit binary: the bytes as one stream
// of bits cut into groups of 7, each in a byte, the last group holding
// what is left (right-aligned).
func smile7Bit(b *bytes.Buffer, data []byte) {
	b.WriteByte(smile7BitBinary)
	smileVInt(b, uint64(len(data)))
	out := make([]byte, 0, len(data)/7*8+8)
	var acc uint64
	bits := 0
	for _, c := range data {
		acc = acc<<8 | uint64(c)
		bits += 8
		for bits >= 7 {
			bits -= 7
			out = append(out, byte(acc>>bits)&0x7F)
		}
	}
	if bits > 0 {
		out = append(out, byte(acc)&(1<<bits-1))
	}
	b.Write(out)
}

// smileKey writes a short ASCII property name (1 to 64 bytes).
func smileKey(b *bytes.Buffer, k string) {
	b.WriteByte(byte(0x80 + len(k) - 1))
	b.WriteString(k)
}

// smileString writes an ASCII string value.
func smileString(b *bytes.Buffer, s string) {
	switch {
	case len(s) == 0:
		b.WriteByte(0x20)
	case len(s) <= 32:
		b.WriteByte(byte(0x40 + len(s) - 1))
		b.WriteString(s)
	case len(s) <= 64:
		b.WriteByte(byte(0x60 + len(s) - 33))
		b.WriteString(s)
	default:
		b.WriteByte(0xE0)
		b.WriteString(s)
		b.WriteByte(0xFC)
	}
}

// smileVInt writes an unsigned number: 7 bits a byte, the last byte 6
// bits with 0x80 set.
func smileVInt(b *bytes.Buffer, v uint64) {
	var tmp [10]byte
	i := len(tmp) - 1
	tmp[i] = byte(v&0x3F) | 0x80
	v >>= 6
	for v > 0 {
		i--
		tmp[i] = byte(v & 0x7F)
		v >>= 7
	}
	b.Write(tmp[i:])
}

// smileLong writes a 64-bit integer value (zigzag).
func smileLong(b *bytes.Buffer, v int64) {
	b.WriteByte(0x25)
	smileVInt(b, uint64((v<<1)^(v>>63)))
}

func smileAction(b *bytes.Buffer, index, id string) {
	smileHeader(b)
	b.WriteByte(smileStartObject)
	smileKey(b, "index")
	b.WriteByte(smileStartObject)
	smileKey(b, "_index")
	smileString(b, index)
	smileKey(b, "_id")
	smileString(b, id)
	b.WriteByte(smileEndObject)
	b.WriteByte(smileEndObject)
	b.WriteByte(smileEndOfDoc)
}

func smileChunk(b *bytes.Buffer, ino uint64, chunk int64, data []byte) {
	smileHeader(b)
	b.WriteByte(smileStartObject)
	smileKey(b, "ino")
	smileLong(b, int64(ino))
	smileKey(b, "chunk")
	smileLong(b, chunk)
	smileKey(b, "data")
	smile7Bit(b, data)
	b.WriteByte(smileEndObject)
	b.WriteByte(smileEndOfDoc)
}

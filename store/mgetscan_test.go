package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// mgetAnswers are answers of the shapes Elasticsearch gives, and some it
// does not.
var mgetAnswers = []string{
	`{"docs":[]}`,
	`{"docs":[{"_index":"fs-data","_id":"5.0","_version":3,"_seq_no":7,"_primary_term":1,"found":true,"_source":{"ino":5,"chunk":0,"data":"AAEC"}}]}`,
	`{"docs":[{"_index":"fs-data","_id":"5.1","found":false},{"_index":"fs-data","_id":"5.2","_seq_no":9,"_primary_term":2,"found":true,"_source":{"ino":5,"chunk":2,"text":"a \"quoted\" {brace} [x] \\\\"}}]}`,
	`{"docs":[{"_index":"fs-data","_id":"x","error":{"type":"index_not_found_exception","reason":"no such index [fs-data]"}}]}`,
	" {\n \"docs\" : [ { \"_id\" : \"a\" , \"found\" : true , \"_source\" : { \"k\" : [ 1 , { \"n\" : null } ] } } ] } ",
	`{"took":1,"docs":[{"_id":"a","found":true,"_source":{"s":"\\"}"}}]}`,
	`{"docs":[{"_id":"a\u0041","found":true,"_source":{}}]}`,
	`{"docs":[{"_id":"a","found":true,"_source":{"s":"unterminated}]}`,
	`{"docs":[{"_id":"a","found":true,"_source":{"s":1]}]}`,
	`{"docs":[{"_id":"a","found":tru,"_source":{}}]}`,
	`{"docs":{}}`,
	`{"nodocs":[]}`,
	`[]`,
	``,
	`{"docs":[{"_id":"a","found":true,"_source":{}}]`,
	`{"do\u0063s":[{"_id":"a","found":true,"_source":{}}]}`,
}

// TestDecodeMgetAgreesWithEncodingJSON: where decodeMget decodes an answer,
// encoding/json decodes it to the same documents, or finds it broken
// inside a _source (which the source's decoder then finds); where it
// gives up, encoding/json decides.
func TestDecodeMgetAgreesWithEncodingJSON(t *testing.T) {
	decoded := 0
	for _, a := range mgetAnswers {
		if checkDecodeMget(t, []byte(a)) {
			decoded++
		}
	}
	if decoded < 6 {
		t.Errorf("decodeMget decoded %d of Elasticsearch's shapes of answers, want at least 6", decoded)
	}
	// A chunk answer of the size the data path reads.
	big := bytes.Repeat([]byte("QUJD"), 350_000)
	a := `{"docs":[{"_index":"fs-data","_id":"1.0","_seq_no":1,"_primary_term":1,"found":true,"_source":{"ino":1,"chunk":0,"data":"` + string(big) + `"}}]}`
	if !checkDecodeMget(t, []byte(a)) {
		t.Error("decodeMget gave up on a chunk answer")
	}
}

func checkDecodeMget(t *testing.T, b []byte) (decoded bool) {
	t.Helper()
	got, ok := decodeMget(b)
	var want struct {
		Docs []getResult `json:"docs"`
	}
	err := json.Unmarshal(b, &want)
	name := string(b[:min(len(b), 60)])
	switch {
	case !ok:
		return false
	case err != nil:
		// Only what decodeMget leaves to others may be broken: a source.
		for _, d := range got {
			if json.Valid(d.Source) {
				continue
			}
			return true
		}
		if !strings.Contains(err.Error(), "invalid") && !strings.Contains(err.Error(), "cannot unmarshal") {
			t.Errorf("%s: decodeMget decoded what encoding/json refuses: %v", name, err)
		}
		return true
	case !reflect.DeepEqual(normal(got), normal(want.Docs)):
		t.Errorf("%s: decodeMget gives %+v, encoding/json %+v", name, got, want.Docs)
	}
	return true
}

// normal makes nil and empty sources alike.
func normal(ds []getResult) []getResult {
	out := make([]getResult, len(ds))
	for i, d := range ds {
		if len(d.Source) == 0 {
			d.Source = nil
		}
		out[i] = d
	}
	return out
}

func FuzzDecodeMget(f *testing.F) {
	for _, a := range mgetAnswers {
		f.Add([]byte(a))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeMget(t, b)
	})
}

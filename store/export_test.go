package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
)

// RawPut writes an arbitrary JSON document, bypassing the model, so that tests
// can plant corrupt documents. which is "paths", "inodes" or "data".
func RawPut(s *Store, ctx context.Context, which, id string, doc any) error {
	index := map[string]string{"paths": s.idx.Paths, "inodes": s.idx.Inodes, "data": s.idx.Data}[which]
	body, _ := json.Marshal(doc)
	res, err := s.do(ctx, "raw put", request{method: "PUT", path: "/" + url.PathEscape(index) + "/_doc/" + url.PathEscape(id), body: body})
	if err != nil {
		return err
	}
	if res.status/100 != 2 {
		return failure(fmt.Sprintf("raw put %s", id), res)
	}
	return nil
}

// RawMapping returns the mapping of one of the filesystem's indices.
func RawMapping(s *Store, ctx context.Context, which string) (dynamic string, props map[string]map[string]any, err error) {
	index := map[string]string{"paths": s.idx.Paths, "inodes": s.idx.Inodes, "data": s.idx.Data, "locks": s.idx.Locks, "sessions": s.idx.Sessions}[which]
	m, err := s.getMapping(ctx, index)
	if err != nil {
		return "", nil, err
	}
	props = map[string]map[string]any{}
	for k, v := range m.Properties {
		props[k] = v
	}
	return m.Dynamic, props, nil
}

// RawCreateIndex creates an index with the given body (to provoke conflicts).
func RawCreateIndex(s *Store, ctx context.Context, which string, body any) error {
	index := map[string]string{"paths": s.idx.Paths, "inodes": s.idx.Inodes, "data": s.idx.Data, "locks": s.idx.Locks, "sessions": s.idx.Sessions}[which]
	b, _ := json.Marshal(body)
	res, err := s.do(ctx, "raw create index", request{method: "PUT", path: "/" + url.PathEscape(index), body: b})
	if err != nil {
		return err
	}
	if res.status/100 != 2 {
		return failure("raw create index", res)
	}
	return nil
}

var EncodeText, DecodeText = encodeText, decodeText

var DecodeChunkFast = decodeChunkFast

// RawDeleteIndex deletes one of the filesystem's indices (to rebuild it as
// an older esfs made it).
func RawDeleteIndex(s *Store, ctx context.Context, which string) error {
	index := map[string]string{"paths": s.idx.Paths, "inodes": s.idx.Inodes, "data": s.idx.Data, "locks": s.idx.Locks, "sessions": s.idx.Sessions}[which]
	res, err := s.do(ctx, "raw delete index", request{method: "DELETE", path: "/" + url.PathEscape(index)})
	if err != nil {
		return err
	}
	if res.status/100 != 2 {
		return failure("raw delete index", res)
	}
	return nil
}

// RawSetting reads one setting of one of the filesystem's indices.
func RawSetting(s *Store, ctx context.Context, which, name string) (string, error) {
	index := map[string]string{"paths": s.idx.Paths, "inodes": s.idx.Inodes, "data": s.idx.Data}[which]
	res, err := s.do(ctx, "raw setting", request{method: "GET", path: "/" + url.PathEscape(index) + "/_settings/" + name, query: url.Values{"flat_settings": {"true"}}})
	if err != nil {
		return "", err
	}
	var body map[string]struct {
		Settings map[string]string `json:"settings"`
	}
	if err := json.Unmarshal(res.body, &body); err != nil {
		return "", err
	}
	return body[index].Settings[name], nil
}

// RawPutSetting changes one dynamic setting of one of the filesystem's indices.
func RawPutSetting(s *Store, ctx context.Context, which, name, value string) error {
	index := map[string]string{"paths": s.idx.Paths, "inodes": s.idx.Inodes, "data": s.idx.Data}[which]
	b, _ := json.Marshal(map[string]string{name: value})
	res, err := s.do(ctx, "raw put setting", request{method: "PUT", path: "/" + url.PathEscape(index) + "/_settings", body: b})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure("raw put setting", res)
	}
	return nil
}

// LinkOpsKept is linkOpsKept, for TestDirLinksLanded.
const LinkOpsKept = linkOpsKept

// ClusterVersion is the cluster's major and minor version.
func ClusterVersion(s *Store, ctx context.Context) (major, minor int, ok bool) {
	return s.clusterVersion(ctx)
}

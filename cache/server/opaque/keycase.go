package opaque

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A request body may name apiVersion, kind, metadata, or a field of the
// metadata, only exactly so. Go's encoding/json (and any decoder like it)
// matches member names case-insensitively, with Unicode folding ("KIND",
// "\u212aind"), and takes the last of several: a body holding both
// "metadata" and "Metadata":{"annotations":{"kcp.io/shard":"beta"}} is
// stored here as shard alpha's (this server reads names case-sensitively,
// as upstream's serializer does) and read by such a client as shard beta's.
// An escaped name ("\u006detadata") or a repeated one does the same to
// every decoder. Refusing them where requests are read keeps the partition
// check meaningful for every reader.

// topLevelKeys are the members this package splits off (see split).
var topLevelKeys = []string{"apiVersion", "kind", "metadata"}

// metadataKeys are the JSON names of metav1.ObjectMeta's fields.
var metadataKeys = func() []string {
	var keys []string
	t := reflect.TypeFor[metav1.ObjectMeta]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}()

// CheckKeys refuses a JSON object (a request body, or an object built from
// one) whose member names could be read as apiVersion, kind or metadata,
// or, inside metadata, as one of its fields, without being exactly that
// name once. data must be valid JSON.
func CheckKeys(data []byte) error {
	return checkMembers(data, "", topLevelKeys, func(key string, value []byte) error {
		if key == "metadata" {
			return CheckMetadataKeys(value)
		}
		return nil
	})
}

// CheckMetadataKeys is CheckKeys for a metadata object alone; anything but
// an object passes (it is refused where it is decoded).
func CheckMetadataKeys(data []byte) error {
	return checkMembers(data, "metadata.", metadataKeys, nil)
}

// checkMembers checks the member names of the object data against known
// (see CheckKeys) and calls then for each known member.
func checkMembers(data []byte, path string, known []string, then func(key string, value []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil
	}
	seen := make([]bool, len(known))
	for i = skipSpace(data, i+1); i < len(data) && data[i] != '}'; {
		keyEnd, err := skipString(data, i)
		if err != nil {
			return err
		}
		raw := data[i+1 : keyEnd-1]
		valStart := skipSpace(data, skipSpace(data, keyEnd)+1)
		valEnd, err := skipValue(data, valStart)
		if err != nil {
			return err
		}
		name := string(raw)
		if strings.IndexByte(name, '\\') >= 0 {
			if err := json.Unmarshal(data[i:keyEnd], &name); err != nil {
				return err
			}
		}
		for n, k := range known {
			if !strings.EqualFold(name, k) {
				continue
			}
			switch {
			case string(raw) != k:
				return fmt.Errorf("member %s%s can be read as %s%s (JSON decoders such as Go's encoding/json match names case-insensitively): write %q exactly, once", path, string(data[i:keyEnd]), path, k, k)
			case seen[n]:
				return fmt.Errorf("member %s%s appears more than once", path, k)
			}
			seen[n] = true
			if then != nil {
				if err := then(k, data[valStart:valEnd]); err != nil {
					return err
				}
			}
		}
		i = skipSpace(data, valEnd)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return nil
}

// CheckJSONPatchKeys is CheckKeys for a JSON patch (RFC 6902): no operation
// may target a member CheckKeys refuses, and a value replacing the whole
// object or its metadata must pass CheckKeys or CheckMetadataKeys. What a
// copy or move from elsewhere in the object builds is checked when the
// patched object is decoded. data must be valid JSON.
func CheckJSONPatchKeys(data []byte) error {
	var ops []struct {
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(data, &ops); err != nil {
		// Not a list of operations: the patch handler says why.
		return nil
	}
	for _, op := range ops {
		// Tokens as gopkg.in/evanphx/json-patch.v4 (upstream's patch
		// handler) reads the path: it drops the first segment whatever it
		// holds, so "0/Kind" targets what "/Kind" does, and a path without
		// any "/" names a top-level member.
		tokens := strings.Split(op.Path, "/")
		if len(tokens) > 1 {
			tokens = tokens[1:]
		}
		for n, t := range tokens {
			tokens[n] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		}
		var err error
		switch {
		case op.Path == "":
			err = CheckKeys(op.Value)
		case len(tokens) == 1 && tokens[0] == "metadata":
			err = CheckMetadataKeys(op.Value)
		default:
			err = checkName("", tokens[0], topLevelKeys)
			if err == nil && len(tokens) > 1 && tokens[0] == "metadata" {
				err = checkName("metadata.", tokens[1], metadataKeys)
			}
		}
		if err != nil {
			return fmt.Errorf("JSON patch path %q: %w", op.Path, err)
		}
	}
	return nil
}

// checkName refuses a name that differs from a known one only in case.
func checkName(path, name string, known []string) error {
	for _, k := range known {
		if name != k && strings.EqualFold(name, k) {
			return fmt.Errorf("member %s%q can be read as %s%s (JSON decoders such as Go's encoding/json match names case-insensitively): write %q exactly", path, name, path, k, k)
		}
	}
	return nil
}

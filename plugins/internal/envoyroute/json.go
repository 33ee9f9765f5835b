package envoyroute

import (
	"bytes"
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// JSON returns the protobuf JSON of m as an Any, with "@type" and proto
// field names, compacted: protojson's output is not byte-stable, and equal
// resources must give equal bytes. Messages in typed_config fields must
// have their types linked in.
func JSON(m proto.Message) (json.RawMessage, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(a)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

package traffic_test

import "google.golang.org/protobuf/proto"

func protoSize(m proto.Message) int { return proto.Size(m) }

package sdk

import "github.com/meshrelay/meshrelay/sdk/protocol"

// sameOutputs numbers the outputs one answer sends, so that an output the
// answer already sent for another cluster is named by its number
// (ClusterOutput.same) rather than sent again. A fleet's clusters mostly
// run the same objects, and a fleet-wide edit changes the same object in
// every one of them: without this, a 10,000-cluster edit sends each new
// object 10,000 times, and the host decodes and hashes each copy only to
// find it holds it.
type sameOutputs struct {
	number map[protocol.ResourceKey]uint32
}

// name returns the number of the output the answer sent that is the same
// as the output of key (identity and body), or -1 when that output is to
// be sent: it then numbers it, if it is among the first
// protocol.MaxSameBodies sent, which only may be named. Each output
// numbered is a key not numbered before, so the count of numbers is the
// next one. A nil sameOutputs (the host does not allow naming) sends
// every output.
func (s *sameOutputs) name(key protocol.ResourceKey) int64 {
	if s == nil {
		return -1
	}
	if n, ok := s.number[key]; ok {
		return int64(n)
	}
	if len(s.number) < protocol.MaxSameBodies {
		if s.number == nil {
			s.number = map[protocol.ResourceKey]uint32{}
		}
		s.number[key] = uint32(len(s.number))
	}
	return -1
}

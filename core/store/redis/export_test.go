package redis

import "github.com/meshrelay/meshrelay/api/snapshot"

// Decodes returns how many stored snapshots s has decoded (or tried to).
func Decodes(s *Store) int64 { return s.codec.decodes.Load() }

// Codec returns a store codec's encode and its decode, which checks the
// data against the version and hash of the snapshot it was encoded from.
func Codec() (encode func(*snapshot.Snapshot) ([]byte, error), decode func([]byte, *snapshot.Snapshot) error) {
	var c codec
	return c.encode, func(data []byte, from *snapshot.Snapshot) error {
		h := from.Hash()
		_, err := c.decode(string(data), versionField(from.Version()), string(h[:]))
		return err
	}
}

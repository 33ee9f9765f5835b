package redis

// Decodes returns how many stored snapshots s has decoded (or tried to).
func Decodes(s *Store) int64 { return s.codec.decodes.Load() }

package ui

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// sessions are the UI's logins: opaque random IDs, kept only in this
// process, each with the admin token it was opened with and an expiry. The
// cookie carries the ID alone, so it is worth nothing to the admin API,
// nothing once logged out or expired, and nothing to another replica.
// Entries are keyed by the ID's SHA-256, so that finding one takes no
// time that depends on how much of an ID a caller guessed right.
type sessions struct {
	life time.Duration
	max  int

	mu   sync.Mutex
	byID map[[32]byte]session
}

type session struct {
	token   string
	expires time.Time
}

func newSessions(life time.Duration, max int) *sessions {
	return &sessions{life: life, max: max, byID: map[[32]byte]session{}}
}

// open starts a session for token and returns its ID. At the bound, the
// session closest to its expiry makes room.
func (s *sessions) open(token string) string {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(raw)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	for len(s.byID) >= s.max {
		var oldest [32]byte
		first := true
		for k, v := range s.byID {
			if first || v.expires.Before(s.byID[oldest].expires) {
				oldest, first = k, false
			}
		}
		delete(s.byID, oldest)
	}
	s.byID[sha256.Sum256([]byte(id))] = session{token: token, expires: now.Add(s.life)}
	return id
}

// token returns the admin token of a live session, or "" for an unknown,
// closed or expired one.
func (s *sessions) token(id string) string {
	if id == "" {
		return ""
	}
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byID[key]
	if !ok {
		return ""
	}
	if !time.Now().Before(v.expires) {
		delete(s.byID, key)
		return ""
	}
	return v.token
}

// close ends a session.
func (s *sessions) close(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(id)))
}

// expire drops the sessions past their expiry; the caller holds mu.
func (s *sessions) expire(now time.Time) {
	for k, v := range s.byID {
		if !now.Before(v.expires) {
			delete(s.byID, k)
		}
	}
}

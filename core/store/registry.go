package store

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"
)

// Cluster is a workload cluster's registry record.
type Cluster struct {
	// Name is the cluster's unique name.
	Name string
	// TokenHash is the hash of the registration token; the token itself is
	// never stored.
	TokenHash []byte
	// TokenExpires is when the registration token stops being accepted.
	TokenExpires time.Time
	// Registered is when the cluster was registered.
	Registered time.Time
	// Serials are the serial numbers of the client certificates issued to
	// the cluster's agent.
	Serials []string
	// CertExpires is when the newest of those certificates expires; zero
	// when none was issued, or when it was issued before this was kept.
	CertExpires time.Time
	// Revoked is set when the cluster's credentials were revoked.
	Revoked bool
	// RevokedAt is when they were revoked.
	RevokedAt time.Time
	// LastSeen is when the cluster's agent last talked to a server.
	LastSeen time.Time
	// Replica is the server replica the agent is connected to, if any.
	Replica string
	// TokenReusable keeps the token valid after a registration; by default
	// a registration consumes it.
	TokenReusable bool
	// SharedToken allows the install-wide shared token for this cluster.
	SharedToken bool
	// SharedRegistered is when the shared token last registered the
	// cluster, and SharedRegisteredFrom the client address it came from.
	SharedRegistered     time.Time
	SharedRegisteredFrom string
	// Labels are the cluster's labels (region, env, tier…), which cluster
	// selectors match; set at registration and changed through the admin
	// API.
	Labels map[string]string
	// Version counts the record's changes; CompareAndPutCluster checks and
	// increments it.
	Version uint64
}

// UpdateCluster reads the record of name, lets update change it and
// stores it with CompareAndPutCluster, reading again and retrying when
// another writer changed it in between. update gets found=false and a
// record with only Name set when none is stored; it may return an error to
// abandon the change, which UpdateCluster returns as is.
func UpdateCluster(ctx context.Context, s Registry, name string, update func(c *Cluster, found bool) error) (Cluster, error) {
	for attempt := 0; ; attempt++ {
		c, err := s.GetCluster(ctx, name)
		found := err == nil
		switch {
		case errors.Is(err, ErrNotFound):
			c = Cluster{Name: name}
		case err != nil:
			return Cluster{}, err
		}
		if err := update(&c, found); err != nil {
			return Cluster{}, err
		}
		c.Name = name
		stored, err := s.CompareAndPutCluster(ctx, c)
		if errors.Is(err, ErrConflict) && attempt < maxUpdateAttempts {
			continue
		}
		return stored, err
	}
}

// maxUpdateAttempts bounds UpdateCluster's retries; each retry means
// another writer succeeded, so the bound is reached only under heavy
// contention on one record.
const maxUpdateAttempts = 100

// Clone returns a copy of c that shares no slices with it.
func (c Cluster) Clone() Cluster {
	c.TokenHash = slices.Clone(c.TokenHash)
	c.Serials = slices.Clone(c.Serials)
	c.Labels = maps.Clone(c.Labels)
	return c
}

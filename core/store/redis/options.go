package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "meshrelay:"

// Options configures a Store.
type Options struct {
	// Client says how to reach Redis: one address for a single server,
	// MasterName and the Sentinels' addresses for Sentinel, IsClusterMode
	// or several addresses for Redis Cluster. ParseURL fills it from a URL.
	// New always sets ContextTimeoutEnabled, so that every call ends with
	// its context.
	Client goredis.UniversalOptions
	// Prefix starts every key and the event channel; DefaultPrefix when
	// empty. Server replicas that share a fleet use the same prefix. On
	// Redis Cluster, New wraps a prefix without a hash tag in one
	// ("meshrelay:" becomes "{meshrelay}:"), so that all of the store is
	// in one hash slot (see the package documentation).
	Prefix string
	// Replica identifies this server replica in events; Watch reports only
	// other replicas' writes. A random ID when empty.
	Replica string
	// Logger receives connection-state changes of the change feed;
	// slog.Default() when nil.
	Logger *slog.Logger
}

// Validate reports whether the options can be used.
func (o *Options) Validate() error {
	if len(o.Client.Addrs) == 0 {
		return errors.New("redis options: no address")
	}
	for _, a := range o.Client.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("redis options: address %q: %w", a, err)
		}
	}
	if o.Client.IsClusterMode && o.Client.DB != 0 {
		return fmt.Errorf("redis options: database %d: Redis Cluster has only database 0", o.Client.DB)
	}
	return nil
}

// ParseURL parses the --store flag's Redis forms:
//
//	redis://[[user]:password@]host[:port][/db][?options]      one server
//	rediss://...                                               one server over TLS
//	redis+sentinel://[[user]:password@]host1[:port],host2/master[/db][?options]
//	redis+cluster://[[user]:password@]host1[:port],host2[?options]
//
// rediss+sentinel:// and rediss+cluster:// use TLS. Ports default to 6379,
// and to 26379 for Sentinels. For single servers, the query takes go-redis's
// options (dial_timeout, pool_size, ...). Every form also takes prefix=
// (the key prefix, see Options.Prefix); Sentinel takes sentinel_username=
// and sentinel_password= for the Sentinels' own authentication, the
// userinfo being the master's.
func ParseURL(s string) (Options, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Options{}, fmt.Errorf("parse redis url: %q has no scheme", redact(s))
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Options{}, fmt.Errorf("parse redis url %q: %w", redact(s), err)
	}
	var o Options
	o.Prefix = query.Get("prefix")
	query.Del("prefix")

	switch scheme {
	case "redis", "rediss":
		u := scheme + "://" + rest
		if len(query) > 0 {
			u += "?" + query.Encode()
		}
		so, err := goredis.ParseURL(u)
		if err != nil {
			return Options{}, fmt.Errorf("parse redis url %q: %w", redact(s), err)
		}
		o.Client = goredis.UniversalOptions{
			Addrs:           []string{so.Addr},
			ClientName:      so.ClientName,
			DB:              so.DB,
			Protocol:        so.Protocol,
			Username:        so.Username,
			Password:        so.Password,
			MaxRetries:      so.MaxRetries,
			MinRetryBackoff: so.MinRetryBackoff,
			MaxRetryBackoff: so.MaxRetryBackoff,
			DialTimeout:     so.DialTimeout,
			ReadTimeout:     so.ReadTimeout,
			WriteTimeout:    so.WriteTimeout,
			PoolFIFO:        so.PoolFIFO,
			PoolSize:        so.PoolSize,
			PoolTimeout:     so.PoolTimeout,
			MinIdleConns:    so.MinIdleConns,
			MaxIdleConns:    so.MaxIdleConns,
			MaxActiveConns:  so.MaxActiveConns,
			ConnMaxIdleTime: so.ConnMaxIdleTime,
			ConnMaxLifetime: so.ConnMaxLifetime,
			TLSConfig:       so.TLSConfig,
		}
	case "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster":
		sentinel := strings.HasSuffix(scheme, "+sentinel")
		if err := parseMulti(&o.Client, rest, sentinel); err != nil {
			return Options{}, fmt.Errorf("parse redis url %q: %w", redact(s), err)
		}
		if strings.HasPrefix(scheme, "rediss") {
			o.Client.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if sentinel {
			o.Client.SentinelUsername = query.Get("sentinel_username")
			o.Client.SentinelPassword = query.Get("sentinel_password")
			query.Del("sentinel_username")
			query.Del("sentinel_password")
		} else {
			o.Client.IsClusterMode = true
		}
		if len(query) > 0 {
			return Options{}, fmt.Errorf("parse redis url %q: unknown options %q", redact(s), query.Encode())
		}
	default:
		return Options{}, fmt.Errorf("parse redis url %q: scheme %q is not redis, rediss, redis+sentinel or redis+cluster", redact(s), scheme)
	}
	if err := o.Validate(); err != nil {
		return Options{}, fmt.Errorf("parse redis url %q: %w", redact(s), err)
	}
	return o, nil
}

// parseMulti parses "[userinfo@]host1,host2[/master][/db]" for Sentinel and
// "[userinfo@]host1,host2" for Cluster.
func parseMulti(c *goredis.UniversalOptions, rest string, sentinel bool) error {
	authority, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		u, err := url.Parse("redis://" + authority[:i+1] + "host")
		if err != nil {
			return fmt.Errorf("userinfo: %w", err)
		}
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
		authority = authority[i+1:]
	}
	defaultPort := "6379"
	if sentinel {
		defaultPort = "26379"
	}
	for h := range strings.SplitSeq(authority, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPort)
		}
		c.Addrs = append(c.Addrs, h)
	}
	if len(c.Addrs) == 0 {
		return errors.New("no hosts")
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) == 1 && parts[0] == "" {
		parts = nil
	}
	if sentinel {
		if len(parts) == 0 {
			return errors.New("no master name: want redis+sentinel://host1,host2/master[/db]")
		}
		c.MasterName, parts = parts[0], parts[1:]
	}
	switch len(parts) {
	case 0:
	case 1:
		db, err := strconv.Atoi(parts[0])
		if err != nil || db < 0 {
			return fmt.Errorf("invalid database %q", parts[0])
		}
		c.DB = db
	default:
		return fmt.Errorf("unexpected path %q", path)
	}
	return nil
}

// redact hides a password in a URL for error messages.
func redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	authority, tail, hasTail := strings.Cut(rest, "/")
	i := strings.LastIndex(authority, "@")
	if i < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(authority[:i], ":")
	if !hasPass {
		return s
	}
	out := scheme + "://" + user + ":xxxxx" + authority[i:]
	if hasTail {
		out += "/" + tail
	}
	return out
}

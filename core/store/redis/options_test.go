package redis_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store/redis"
)

func TestParseURL(t *testing.T) {
	tests := map[string]struct {
		url     string
		want    goredis.UniversalOptions
		prefix  string
		tls     bool
		wantErr bool
	}{
		"single": {
			url:  "redis://127.0.0.1:6380/2",
			want: goredis.UniversalOptions{Addrs: []string{"127.0.0.1:6380"}, DB: 2},
		},
		"password and prefix": {
			url:    "redis://:s3cret@redis.example:6379/0?prefix=fleet-a:",
			want:   goredis.UniversalOptions{Addrs: []string{"redis.example:6379"}, Password: "s3cret"},
			prefix: "fleet-a:",
		},
		"default port": {
			url:  "redis://redis.example",
			want: goredis.UniversalOptions{Addrs: []string{"redis.example:6379"}},
		},
		"tls": {
			url:  "rediss://user:pw@redis.example:6380/1",
			want: goredis.UniversalOptions{Addrs: []string{"redis.example:6380"}, Username: "user", Password: "pw", DB: 1},
			tls:  true,
		},
		"sentinel": {
			url: "redis+sentinel://:pw@s1:26379,s2,s3:26380/mymaster/3?sentinel_password=spw",
			want: goredis.UniversalOptions{
				Addrs:            []string{"s1:26379", "s2:26379", "s3:26380"},
				MasterName:       "mymaster",
				DB:               3,
				Password:         "pw",
				SentinelPassword: "spw",
			},
		},
		"sentinel tls without db": {
			url:  "rediss+sentinel://s1/mymaster",
			want: goredis.UniversalOptions{Addrs: []string{"s1:26379"}, MasterName: "mymaster"},
			tls:  true,
		},
		"cluster": {
			url:  "redis+cluster://n1:7000,n2:7001,n3",
			want: goredis.UniversalOptions{Addrs: []string{"n1:7000", "n2:7001", "n3:6379"}, IsClusterMode: true},
		},
		"cluster single seed": {
			url:  "redis+cluster://:pw@cfg.example:6379",
			want: goredis.UniversalOptions{Addrs: []string{"cfg.example:6379"}, IsClusterMode: true, Password: "pw"},
		},
		"sentinel without master": {url: "redis+sentinel://s1,s2", wantErr: true},
		"cluster with db":         {url: "redis+cluster://n1/2", wantErr: true},
		"cluster unknown option":  {url: "redis+cluster://n1?bogus=1", wantErr: true},
		"unknown scheme":          {url: "memcached://x", wantErr: true},
		"no scheme":               {url: "localhost:6379", wantErr: true},
		"bad db":                  {url: "redis+sentinel://s1/m/x", wantErr: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := redis.ParseURL(tt.url)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %+v, want an error", tt.url, got.Client)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.url, err)
			}
			if (got.Client.TLSConfig != nil) != tt.tls {
				t.Errorf("ParseURL(%q) TLS = %v, want %v", tt.url, got.Client.TLSConfig != nil, tt.tls)
			}
			if got.Prefix != tt.prefix {
				t.Errorf("ParseURL(%q) prefix = %q, want %q", tt.url, got.Prefix, tt.prefix)
			}
			opts := []cmp.Option{
				cmpopts.IgnoreFields(goredis.UniversalOptions{}, "TLSConfig", "DialTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "MaxRetries", "MinRetryBackoff", "MaxRetryBackoff", "PoolSize", "MinIdleConns", "MaxIdleConns", "MaxActiveConns", "ConnMaxIdleTime", "ConnMaxLifetime", "Protocol", "ClientName", "PoolFIFO"),
				cmpopts.IgnoreUnexported(goredis.UniversalOptions{}),
			}
			if diff := cmp.Diff(tt.want, got.Client, opts...); diff != "" {
				t.Errorf("ParseURL(%q) (-want +got):\n%s", tt.url, diff)
			}
		})
	}
}

func TestParseURLRedactsPassword(t *testing.T) {
	_, err := redis.ParseURL("redis+sentinel://:hunter2@s1,s2")
	if err == nil {
		t.Fatal("ParseURL without a master name succeeded")
	}
	if got := err.Error(); strings.Contains(got, "hunter2") {
		t.Errorf("error %q shows the password", got)
	}
}

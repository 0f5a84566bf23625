// Command handwritten is the hand-written rate limiter docs/bench/peers.sh
// measures otpguard against: what a team writes in an afternoon instead of
// running otpguard. net/http, go-redis and go-redis/redis_rate (GCRA, one
// Lua script per decision), no logging, no metrics, no fallback. It takes
// otpguard's own request, POST /limits/check {"policy":"...","key":"..."}
// (the policy is ignored: one limit for every key), so that the same wrk
// script drives both. A module of its own: the main module's dependencies
// do not grow by redis_rate.
//
//	ADDR=127.0.0.1:18201 REDIS_ADDR=127.0.0.1:6379 PREFIX=hw: handwritten
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: env("REDIS_ADDR", "127.0.0.1:6379")})
	limiter := redis_rate.NewLimiter(rdb)
	// Never reached in the benchmark: every decision writes, as otpguard's do.
	limit := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Hour}
	prefix := env("PREFIX", "hw:")
	http.HandleFunc("POST /limits/check", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Key string `json:"key"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Key == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		res, err := limiter.Allow(r.Context(), prefix+req.Key, limit)
		if err != nil {
			http.Error(w, "redis unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if res.Allowed == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"allowed": res.Allowed > 0, "remaining": res.Remaining, "retry_after_ms": res.RetryAfter.Milliseconds(),
		})
	})
	log.Fatal(http.ListenAndServe(env("ADDR", "127.0.0.1:18201"), nil))
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

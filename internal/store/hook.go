package store

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// TimingHook is a go-redis hook that reports the duration and error of
// every round trip (a command, or a whole pipeline) to observe. redis.Nil is
// an answer, not an error.
type TimingHook func(d time.Duration, err error)

var _ redis.Hook = TimingHook(nil)

// DialHook passes dials through untimed: their cost shows in the command.
func (h TimingHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook times one command.
func (h TimingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h(time.Since(start), answerErr(err))
		return err
	}
}

// ProcessPipelineHook times one pipeline or transaction.
func (h TimingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(coalescedKey{}) != nil {
			return next(ctx, cmds) // each command was timed by its caller
		}
		start := time.Now()
		err := next(ctx, cmds)
		h(time.Since(start), answerErr(err))
		return err
	}
}

func answerErr(err error) error {
	if err == nil {
		// Most round trips: and errors.As would move re to the heap on
		// every call, an allocation per command for nothing.
		return nil
	}
	if errors.Is(err, redis.Nil) {
		return nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return nil // the server answered; a NOSCRIPT is not an outage
	}
	return err
}

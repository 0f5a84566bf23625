// Package ops is otpguard's ops desk: who is blocked now and why, unblock,
// the deny-list and the audit trail, and the runtime loops behind them
// (the deny-list cache and its refresher, the audit queue's writer,
// retention) and the limit on failed ops sign-ins.
//
// Ops decisions (deny-list entries, the audit trail) live in SQL rather
// than Redis: they must survive a Redis flush or failover, and nobody may
// lose the record of who unblocked whom because a cache was emptied.
//
// ops builds on the domain in package guard (numbers, deny entries, audit
// events, errors) and guard never imports it: the OTP rules reach the
// deny-list and the audit trail through guard's own small interfaces
// (DenyChecker, EventSink, Blocks), which DenyCache, AuditQueue and the
// stores satisfy.
package ops

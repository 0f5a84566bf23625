// Package guardtest holds the hand-written fakes of guard's small
// interfaces that the tests of every package share, so that none keeps a
// copy: a store that can go down (OutageStore), an SMS outbox (Outbox), a
// sender of one function (Sender) and an audit sink that keeps its events
// (Events). It is imported by tests only.
package guardtest

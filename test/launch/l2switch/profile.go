package l2switch

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Impairment is what one link does to the frames that cross it. The zero
// Impairment passes every frame at once.
type Impairment struct {
	// Delay is how long a frame takes to cross the link.
	Delay time.Duration
	// Jitter spreads each frame's delay evenly over Delay ± Jitter (never
	// below zero). Jitter alone does not reorder: a frame never leaves a
	// link before the frame that entered it first.
	Jitter time.Duration
	// Loss is the probability that a frame is dropped, from 0 to 1.
	Loss float64
	// Duplicate is the probability that a frame arrives twice. The copy
	// has a delay of its own and follows the original.
	Duplicate float64
	// Reorder is the probability that a frame is held back outside the
	// link's order, by Delay + Jitter once more (at least MinReorderHold),
	// so that the frames sent after it overtake it.
	Reorder float64
}

// MinReorderHold is the least time a reordered frame is held back, so that
// frames overtake it on links without delay too.
const MinReorderHold = 2 * time.Millisecond

// timed reports whether frames on the link wait: with no delay, jitter or
// reordering, a frame is passed on at once by the goroutine that read it.
func (i Impairment) timed() bool {
	return i.Delay > 0 || i.Jitter > 0 || i.Reorder > 0
}

// Validate returns an error naming the first field out of range.
func (i Impairment) Validate() error {
	if i.Delay < 0 || i.Jitter < 0 {
		return fmt.Errorf("negative delay %v or jitter %v", i.Delay, i.Jitter)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", i.Loss}, {"dup", i.Duplicate}, {"reorder", i.Reorder}} {
		// Written so that NaN fails too.
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("%s %v: want a probability from 0 to 1 (0%% to 100%%)", p.name, p.v)
		}
	}
	return nil
}

// Profile is the impairment of every link of a switch and the seed of its
// random decisions: what launch-cluster's -net-chaos flag and the
// harness's CAIRN_NET_CHAOS hold, as ParseProfile reads and String writes
// it.
type Profile struct {
	Impairment
	// Seed seeds the random numbers of every link. Zero means a random
	// seed, which New picks and Switch.Profile reports, so that a run can
	// be replayed.
	Seed uint64
}

// ParseProfile reads a profile written as comma-separated key=value pairs:
//
//	delay=50ms,jitter=20ms,loss=2%,dup=0.5%,reorder=0.5%,seed=42
//
// Durations are Go's (time.ParseDuration, or 0); probabilities are
// percentages ("2%") or fractions ("0.02"). Every key is optional, but at
// least one must be given: "delay=0" is a switch that impairs nothing.
func ParseProfile(s string) (Profile, error) {
	var p Profile
	if strings.TrimSpace(s) == "" {
		return p, errors.New("empty network profile: give at least one of delay, jitter, loss, dup, reorder, seed (delay=0 impairs nothing)")
	}
	seen := map[string]bool{}
	for _, field := range strings.Split(s, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			return Profile{}, fmt.Errorf("network profile %q: %q is not key=value", s, field)
		}
		if seen[key] {
			return Profile{}, fmt.Errorf("network profile %q: %s given twice", s, key)
		}
		seen[key] = true
		var err error
		switch key {
		case "delay":
			p.Delay, err = parseDuration(value)
		case "jitter":
			p.Jitter, err = parseDuration(value)
		case "loss":
			p.Loss, err = parseProbability(value)
		case "dup":
			p.Duplicate, err = parseProbability(value)
		case "reorder":
			p.Reorder, err = parseProbability(value)
		case "seed":
			p.Seed, err = strconv.ParseUint(value, 10, 64)
		default:
			return Profile{}, fmt.Errorf("network profile %q: unknown key %q (want delay, jitter, loss, dup, reorder, seed)", s, key)
		}
		if err != nil {
			return Profile{}, fmt.Errorf("network profile %q: %s: %w", s, key, err)
		}
	}
	if err := p.Validate(); err != nil {
		return Profile{}, fmt.Errorf("network profile %q: %w", s, err)
	}
	return p, nil
}

func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

func parseProbability(s string) (float64, error) {
	scale := 1.0
	if v, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = v, 100
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	return v / scale, nil
}

// String writes the profile the way ParseProfile reads it, leaving out
// what is zero: the line that replays a run once the seed is in it.
func (p Profile) String() string {
	var fields []string
	if p.Delay > 0 || p.Impairment == (Impairment{}) {
		fields = append(fields, "delay="+formatDuration(p.Delay))
	}
	if p.Jitter > 0 {
		fields = append(fields, "jitter="+formatDuration(p.Jitter))
	}
	for _, f := range []struct {
		key string
		v   float64
	}{{"loss", p.Loss}, {"dup", p.Duplicate}, {"reorder", p.Reorder}} {
		if f.v != 0 {
			fields = append(fields, f.key+"="+strconv.FormatFloat(f.v*100, 'g', -1, 64)+"%")
		}
	}
	if p.Seed != 0 {
		fields = append(fields, "seed="+strconv.FormatUint(p.Seed, 10))
	}
	return strings.Join(fields, ",")
}

func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.String()
}

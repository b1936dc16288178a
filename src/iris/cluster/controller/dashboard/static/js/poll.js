// Repeats an async refresh: the next run starts `intervalMs` after the previous one ended, so
// slow answers never pile up. Hidden tabs refresh less often.

export class Poller {
  constructor(fn, intervalMs) {
    this.fn = fn;
    this.intervalMs = intervalMs;
    this.running = false;
    this.inFlight = false;
    this.again = false;
    this.timer = null;
  }

  start() {
    this.running = true;
    this.now();
    return this;
  }

  /** Refresh right away (or right after the refresh in flight). */
  now() {
    if (!this.running) return;
    if (this.inFlight) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.run();
  }

  async run() {
    this.inFlight = true;
    try {
      await this.fn();
    } catch (err) {
      console.debug("refresh failed", err);
    } finally {
      this.inFlight = false;
    }
    if (!this.running) return;
    if (this.again) {
      this.again = false;
      this.run();
      return;
    }
    const delay = document.hidden ? Math.max(this.intervalMs, 10000) : this.intervalMs;
    this.timer = setTimeout(() => this.run(), delay);
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
  }
}

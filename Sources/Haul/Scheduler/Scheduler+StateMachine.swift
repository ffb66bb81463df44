import DequeModule

/// Decides which waiting transfer starts next under a global and a per-host limit.
enum Scheduler {}

extension Scheduler {
    /// The queue of waiting transfers and the count of running ones: synchronous, free of I/O, clocks and locks.
    ///
    /// Transfers start in the order they were queued, except that a transfer whose host is at its limit lets the
    /// next transfer of another host go first. Each host has its own FIFO queue, so choosing the next start costs
    /// O(number of hosts), not O(number of waiting transfers). Removing a waiting transfer is O(1): its entry is
    /// left in the queue and skipped when it reaches the head.
    struct StateMachine: Sendable {
        private struct Entry: Sendable {
            var id: TransferID
            var sequence: Int
        }

        /// How many transfers run at once, over all hosts.
        private(set) var maximumConcurrent: Int
        /// How many transfers run at once against one host.
        private(set) var maximumPerHost: Int
        private var queues: [String: Deque<Entry>] = [:]
        private var waiting: [TransferID: (host: String, sequence: Int)] = [:]
        private var runningPerHost: [String: Int] = [:]
        private var running: [TransferID: String] = [:]
        /// Hosts that asked us to wait (`Retry-After`), with how many holds are on each.
        private var holds: [String: Int] = [:]
        private var nextSequence = 0

        init(maximumConcurrent: Int, maximumPerHost: Int) {
            precondition(maximumConcurrent > 0 && maximumPerHost > 0, "Concurrency limits must be positive")
            self.maximumConcurrent = maximumConcurrent
            self.maximumPerHost = maximumPerHost
        }

        /// The number of transfers running now.
        var runningCount: Int { self.running.count }
        /// The number of transfers waiting for a slot.
        var waitingCount: Int { self.waiting.count }

        /// A transfer is ready to run; returns the transfers to start now (possibly this one).
        mutating func enqueue(_ id: TransferID, host: String) -> [TransferID] {
            precondition(self.waiting[id] == nil && self.running[id] == nil, "\(id) is queued twice")
            let sequence = self.nextSequence
            self.nextSequence += 1
            self.waiting[id] = (host, sequence)
            self.queues[host, default: []].append(Entry(id: id, sequence: sequence))
            return self.startable()
        }

        /// A waiting transfer no longer wants to run (paused or cancelled); a no-op if it is not waiting.
        mutating func removeWaiting(_ id: TransferID) {
            self.waiting[id] = nil
        }

        /// A running transfer ended (finished, paused or failed); returns the transfers to start now.
        mutating func runningEnded(_ id: TransferID) -> [TransferID] {
            guard let host = self.running.removeValue(forKey: id) else {
                preconditionFailure("\(id) ended but was not running")
            }
            self.runningPerHost[host, default: 1] -= 1
            if self.runningPerHost[host] == 0 { self.runningPerHost[host] = nil }
            return self.startable()
        }

        /// A host asked us to wait: nothing new starts against it until the hold is released.
        mutating func hold(_ host: String) {
            self.holds[host, default: 0] += 1
        }

        /// A hold on a host has passed; returns the transfers to start now.
        mutating func release(_ host: String) -> [TransferID] {
            guard let count = self.holds[host] else { return [] }
            self.holds[host] = count > 1 ? count - 1 : nil
            return self.startable()
        }

        /// Moves waiting transfers to running while the limits allow, oldest first among hosts with room.
        private mutating func startable() -> [TransferID] {
            var started: [TransferID] = []
            while self.running.count < self.maximumConcurrent {
                var best: (host: String, entry: Entry)?
                for host in Array(self.queues.keys) {
                    guard self.runningPerHost[host, default: 0] < self.maximumPerHost, self.holds[host] == nil else {
                        continue
                    }
                    guard let head = self.liveHead(of: host) else { continue }
                    if best == nil || head.sequence < best!.entry.sequence { best = (host, head) }
                }
                guard let (host, entry) = best else { break }
                self.queues[host]!.removeFirst()
                if self.queues[host]!.isEmpty { self.queues[host] = nil }
                self.waiting[entry.id] = nil
                self.running[entry.id] = host
                self.runningPerHost[host, default: 0] += 1
                started.append(entry.id)
            }
            return started
        }

        /// The first entry of a host's queue that is still waiting, dropping stale ones; removes empty queues.
        private mutating func liveHead(of host: String) -> Entry? {
            while let head = self.queues[host]?.first {
                if let live = self.waiting[head.id], live.sequence == head.sequence { return head }
                self.queues[host]!.removeFirst()
            }
            self.queues[host] = nil
            return nil
        }
    }
}

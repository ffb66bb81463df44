/// Aggregates the progress of a batch's transfers into a ``BatchProgress`` that never goes backwards.
///
/// Pure: it is told sizes, byte counts and results, and the caller supplies the clock readings. Each transfer
/// contributes its high-water mark of received bytes, so a transfer that restarts from zero counts nothing new until
/// it passes its earlier mark; a file of unknown size weighs the average known size until its size is known; a
/// finished transfer (whatever its result) weighs exactly what it received or was expected to, and counts as done.
struct BatchProgressTracker: Sendable {
    private struct Item: Sendable {
        var expectedBytes: Int64?
        var highWater: Int64 = 0
        var finishedState: TransferState?
    }

    private var items: [TransferID: Item] = [:]
    private var counts: [TransferState: Int] = [:]
    private var transferredBytes: Int64 = 0
    private var lastFraction: Double = 0
    private var rate = RateEstimator()

    /// A transfer joined the batch.
    mutating func added(_ id: TransferID, expectedBytes: Int64?) {
        guard self.items[id] == nil else { return }
        self.items[id] = Item(expectedBytes: expectedBytes)
    }

    /// A transfer's size and bytes received so far.
    mutating func progressed(_ id: TransferID, receivedBytes: Int64, expectedBytes: Int64?) {
        guard var item = self.items[id], item.finishedState == nil else { return }
        if let expectedBytes { item.expectedBytes = expectedBytes }
        if receivedBytes > item.highWater {
            self.transferredBytes += receivedBytes - item.highWater
            item.highWater = receivedBytes
        }
        self.items[id] = item
    }

    /// A transfer finished; a completed one gives its final size.
    mutating func finished(_ id: TransferID, state: TransferState, byteCount: Int64?) {
        guard var item = self.items[id], item.finishedState == nil else { return }
        if let byteCount {
            item.expectedBytes = byteCount
            if byteCount > item.highWater {
                self.transferredBytes += byteCount - item.highWater
                item.highWater = byteCount
            }
        }
        item.finishedState = state
        self.counts[state, default: 0] += 1
        self.items[id] = item
    }

    /// The batch's progress at `instant`.
    mutating func snapshot(at instant: ContinuousClock.Instant) -> BatchProgress {
        self.rate.record(totalBytes: self.transferredBytes, at: instant)
        var knownExpected: Int64 = 0
        var knownCount = 0
        var unknownCount = 0
        for item in self.items.values {
            if let expected = item.expectedBytes {
                knownExpected += expected
                knownCount += 1
            } else if item.finishedState == nil {
                unknownCount += 1
            }
        }
        let averageKnown = knownCount > 0 ? Double(knownExpected) / Double(knownCount) : 1
        var weight = 0.0
        var done = 0.0
        for item in self.items.values {
            let itemWeight: Double
            if let expected = item.expectedBytes {
                itemWeight = Double(expected)
            } else if item.finishedState != nil {
                itemWeight = Double(item.highWater)
            } else {
                itemWeight = max(averageKnown, Double(item.highWater))
            }
            weight += itemWeight
            done += item.finishedState != nil ? itemWeight : min(itemWeight, Double(item.highWater))
        }
        let finishedCount = self.counts.values.reduce(0, +)
        let allFinished = finishedCount == self.items.count
        var fraction: Double
        if allFinished {
            fraction = 1
        } else {
            fraction = weight > 0 ? min(done / weight, 1) : 0
            // A newly known size can lower the honest ratio; the reported one holds until it is passed, and it
            // only reaches 1 when everything has finished.
            fraction = min(max(fraction, self.lastFraction), 1 - 1e-9)
        }
        self.lastFraction = fraction
        let remaining = Int64(max(0, weight - done))
        return BatchProgress(
            totalFiles: self.items.count,
            completedFiles: self.counts[.completed, default: 0],
            failedFiles: self.counts[.failed, default: 0],
            cancelledFiles: self.counts[.cancelled, default: 0],
            skippedFiles: self.counts[.skipped, default: 0],
            transferredBytes: self.transferredBytes,
            expectedBytes: unknownCount == 0 ? knownExpected : nil,
            knownExpectedBytes: knownExpected,
            filesOfUnknownSize: unknownCount,
            fractionCompleted: fraction,
            bytesPerSecond: self.rate.bytesPerSecond,
            estimatedTimeRemaining: allFinished
                ? .zero : estimatedTime(remainingBytes: remaining, bytesPerSecond: self.rate.bytesPerSecond)
        )
    }
}

/// Aggregates the progress of a batch's transfers into a ``BatchProgress`` that never goes backwards.
///
/// Pure: it is told sizes, byte counts and results, and the caller supplies the clock readings. Each transfer
/// contributes its high-water mark of received bytes, so a transfer that restarts from zero counts nothing new until
/// it passes its earlier mark. Files of unknown size weigh the average known size between them (or what they have
/// received, if more) until their size is known; a finished transfer, whatever its result, weighs what it was
/// expected to or received, and counts as done.
///
/// Every update and every snapshot costs O(1): the tracker keeps running sums, and each item's share of them, so a
/// batch of 100,000 files costs no more per event than a batch of ten.
package struct BatchProgressTracker: Sendable {
    private struct Item: Sendable {
        var expectedBytes: Int64?
        var highWater: Int64 = 0
        var finishedState: TransferState?
    }

    /// The sums every snapshot is made of; an item adds its share and takes it back before it changes.
    private struct Sums: Sendable {
        /// Over items of known size: their sizes, how many, and how much of them is done.
        var knownBytes: Int64 = 0
        var knownCount = 0
        var knownDone: Int64 = 0
        /// Finished items of unknown size weigh, and have done, what they received.
        var unknownFinishedBytes: Int64 = 0
        /// Unfinished items of unknown size: how many, and what they received.
        var unknownCount = 0
        var unknownReceived: Int64 = 0

        mutating func add(_ item: Item, sign: Int64) {
            if let expected = item.expectedBytes {
                self.knownBytes += sign * expected
                self.knownCount += Int(sign)
                self.knownDone += sign * (item.finishedState != nil ? expected : min(item.highWater, expected))
            } else if item.finishedState != nil {
                self.unknownFinishedBytes += sign * item.highWater
            } else {
                self.unknownCount += Int(sign)
                self.unknownReceived += sign * item.highWater
            }
        }
    }

    /// The unfinished items (a finished item's share stays in the sums; the item itself is dropped, so a batch of
    /// 100,000 files does not keep 100,000 entries).
    private var items: [TransferID: Item] = [:]
    /// How many items have been added, and how many of them finished.
    private var itemCount = 0
    /// How many items the batch will have in all, when it was told (items added over time).
    private var expectedItemCount = 0

    package init() {}
    private var sums = Sums()
    private var counts: [TransferState: Int] = [:]
    private var finishedCount = 0
    private var transferredBytes: Int64 = 0
    private var lastFraction: Double = 0
    private var rate = RateEstimator()

    /// The batch will have `count` items in all: until they are added, the missing ones count as files of unknown
    /// size (they weigh the average known size, and the file count includes them).
    package mutating func expect(itemCount count: Int) {
        self.expectedItemCount = max(0, count)
    }

    /// A transfer joined the batch.
    package mutating func added(_ id: TransferID, expectedBytes: Int64?) {
        guard self.items[id] == nil else { return }
        let item = Item(expectedBytes: expectedBytes)
        self.items[id] = item
        self.itemCount += 1
        self.sums.add(item, sign: 1)
    }

    /// A transfer's size and bytes received so far.
    package mutating func progressed(_ id: TransferID, receivedBytes: Int64, expectedBytes: Int64?) {
        self.update(id) { item in
            if let expectedBytes { item.expectedBytes = expectedBytes }
            item.highWater = max(item.highWater, receivedBytes)
        }
    }

    /// A transfer finished; a completed one gives its final size.
    package mutating func finished(_ id: TransferID, state: TransferState, byteCount: Int64?) {
        // Only unfinished items are kept: a finished one is gone, and finishing it again changes nothing. Taken out
        // in one look-up of the table (it took four: a check, a read, a write, a removal).
        guard let before = self.items.removeValue(forKey: id) else { return }
        self.counts[state, default: 0] += 1
        self.finishedCount += 1
        var after = before
        if let byteCount {
            after.expectedBytes = byteCount
            after.highWater = max(after.highWater, byteCount)
        }
        after.finishedState = state
        self.account(from: before, to: after)
    }

    /// Changes an unfinished item where it is, in one look-up of the table.
    private mutating func update(_ id: TransferID, _ change: (inout Item) -> Void) {
        guard let index = self.items.index(forKey: id) else { return }
        let before = self.items.values[index]
        change(&self.items.values[index])
        self.account(from: before, to: self.items.values[index])
    }

    /// Moves the sums from what an item was to what it is.
    private mutating func account(from before: Item, to after: Item) {
        self.sums.add(before, sign: -1)
        self.sums.add(after, sign: 1)
        self.transferredBytes += after.highWater - before.highWater
    }

    /// The batch's progress at `instant`.
    package mutating func snapshot(at instant: ContinuousClock.Instant) -> BatchProgress {
        self.rate.record(totalBytes: self.transferredBytes, at: instant)
        let sums = self.sums
        let notYetAdded = max(0, self.expectedItemCount - self.itemCount)
        let averageKnown = sums.knownCount > 0 ? Double(sums.knownBytes) / Double(sums.knownCount) : 1
        let unknownWeight = max(
            Double(sums.unknownCount + notYetAdded) * averageKnown,
            Double(sums.unknownReceived)
        )
        let weight = Double(sums.knownBytes + sums.unknownFinishedBytes) + unknownWeight
        let done = Double(sums.knownDone + sums.unknownFinishedBytes) + min(Double(sums.unknownReceived), unknownWeight)
        let allFinished = self.finishedCount == self.itemCount && notYetAdded == 0
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
        return BatchProgress(
            totalFiles: self.itemCount + notYetAdded,
            completedFiles: self.counts[.completed, default: 0],
            failedFiles: self.counts[.failed, default: 0],
            cancelledFiles: self.counts[.cancelled, default: 0],
            skippedFiles: self.counts[.skipped, default: 0],
            transferredBytes: self.transferredBytes,
            expectedBytes: sums.unknownCount + notYetAdded == 0 ? sums.knownBytes : nil,
            knownExpectedBytes: sums.knownBytes,
            filesOfUnknownSize: sums.unknownCount + notYetAdded,
            fractionCompleted: fraction,
            bytesPerSecond: self.rate.bytesPerSecond,
            estimatedTimeRemaining: allFinished
                ? .zero
                : estimatedTime(remainingBytes: Int64(max(0, weight - done)), bytesPerSecond: self.rate.bytesPerSecond)
        )
    }
}

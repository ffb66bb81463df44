import Testing

@testable import Haul

@Suite("Aggregating progress")
struct ProgressTests {
    let start = ContinuousClock.now

    @Test func weighsFilesByTheirBytes() {
        var tracker = BatchProgressTracker()
        tracker.added("big", expectedBytes: 900)
        tracker.added("small", expectedBytes: 100)
        tracker.progressed("small", receivedBytes: 100, expectedBytes: 100)
        tracker.finished("small", state: .completed, byteCount: 100)
        let progress = tracker.snapshot(at: self.start)
        #expect(progress.fractionCompleted == 0.1)
        #expect(progress.completedFiles == 1)
        #expect(progress.remainingFiles == 1)
        #expect(progress.expectedBytes == 1000)
    }

    @Test func neverGoesBackwardsWhenAFileRestartsOrASizeBecomesKnown() {
        var tracker = BatchProgressTracker()
        tracker.added("a", expectedBytes: 100)
        tracker.added("b", expectedBytes: nil)
        tracker.progressed("a", receivedBytes: 80, expectedBytes: 100)
        let before = tracker.snapshot(at: self.start)
        #expect(before.expectedBytes == nil)
        #expect(before.filesOfUnknownSize == 1)
        tracker.progressed("a", receivedBytes: 0, expectedBytes: 100)
        tracker.progressed("b", receivedBytes: 0, expectedBytes: 10_000)
        let after = tracker.snapshot(at: self.start + .seconds(1))
        #expect(after.transferredBytes == 80)
        #expect(after.fractionCompleted >= before.fractionCompleted)
        #expect(after.expectedBytes == 10_100)
    }

    @Test func reachesExactlyOneOnlyWhenEveryFileHasFinished() {
        var tracker = BatchProgressTracker()
        tracker.added("a", expectedBytes: 10)
        tracker.added("b", expectedBytes: 10)
        tracker.progressed("a", receivedBytes: 10, expectedBytes: 10)
        tracker.progressed("b", receivedBytes: 10, expectedBytes: 10)
        #expect(tracker.snapshot(at: self.start).fractionCompleted < 1)
        tracker.finished("a", state: .completed, byteCount: 10)
        tracker.finished("b", state: .failed, byteCount: nil)
        let done = tracker.snapshot(at: self.start)
        #expect(done.fractionCompleted == 1)
        #expect(done.failedFiles == 1)
        #expect(done.estimatedTimeRemaining == .zero)
    }

    @Test func itemsAnnouncedButNotYetAddedCountAsFilesOfUnknownSize() {
        var tracker = BatchProgressTracker()
        tracker.expect(itemCount: 4)
        tracker.added("a", expectedBytes: 100)
        tracker.finished("a", state: .completed, byteCount: 100)
        let early = tracker.snapshot(at: .now)
        #expect(early.totalFiles == 4)
        #expect(early.filesOfUnknownSize == 3)
        #expect(early.expectedBytes == nil)
        #expect(abs(early.fractionCompleted - 0.25) < 1e-9, "the three missing items weigh the average known size")
        for id in ["b", "c", "d"] {
            tracker.added(TransferID(id), expectedBytes: 100)
            tracker.finished(TransferID(id), state: .completed, byteCount: 100)
        }
        let done = tracker.snapshot(at: .now)
        #expect(done.totalFiles == 4)
        #expect(done.completedFiles == 4)
        #expect(done.fractionCompleted == 1)
    }

    @Test func anItemAddedAgainAfterItsTransferFinishedCountsAsAnotherFile() {
        var tracker = BatchProgressTracker()
        tracker.added("a", expectedBytes: 100)
        tracker.finished("a", state: .completed, byteCount: 100)
        tracker.added("a", expectedBytes: 100)
        tracker.finished("a", state: .completed, byteCount: 100)
        let progress = tracker.snapshot(at: .now)
        #expect(progress.totalFiles == 2)
        #expect(progress.completedFiles == 2)
        #expect(progress.fractionCompleted == 1)
    }

    @Test func estimatesSpeedAsAMovingAverage() {
        var rate = RateEstimator()
        rate.record(totalBytes: 0, at: self.start)
        for second in 1...10 { rate.record(totalBytes: Int64(second) * 1_000_000, at: self.start + .seconds(second)) }
        #expect(abs(rate.bytesPerSecond - 1_000_000) < 1)
        rate.record(totalBytes: 10_000_000, at: self.start + .seconds(13))
        #expect(rate.bytesPerSecond < 1_000_000 && rate.bytesPerSecond > 0)
    }

    @Test func aWholeFileCountedMicrosecondsAfterTheLastReadingDoesNotMakeTheSpeedJump() {
        var rate = RateEstimator()
        rate.record(totalBytes: 0, at: self.start)
        // A file that completed just after a reading: its last mebibyte counted 10 µs later.
        rate.record(totalBytes: 1_048_576, at: self.start + .microseconds(10))
        for tenth in 1...10 {
            rate.record(totalBytes: 1_048_576 + Int64(tenth) * 5_000_000, at: self.start + .milliseconds(100 * tenth))
        }
        // 51 MB over the second: about that, not the 105 GB/s of the 10 µs interval.
        #expect((45_000_000...60_000_000).contains(rate.bytesPerSecond), "\(rate.bytesPerSecond)")
    }

    @Test func thereIsNoSpeedUntilTheReadingsSpanAProgressInterval() {
        var rate = RateEstimator()
        rate.record(totalBytes: 0, at: self.start)
        rate.record(totalBytes: 2_000_000, at: self.start + .milliseconds(40))
        #expect(rate.bytesPerSecond == 0)
        rate.record(totalBytes: 5_000_000, at: self.start + .milliseconds(100))
        #expect(abs(rate.bytesPerSecond - 50_000_000) < 1_000_000)
    }

    @Test func inItsFirstSecondsTheSpeedIsTheBytesOverTheTimeNotTheFirstIntervalsRate() {
        var rate = RateEstimator()
        rate.record(totalBytes: 0, at: self.start)
        // A slow first tenth of a second (connections opening), then 50 MB/s.
        rate.record(totalBytes: 1_000_000, at: self.start + .milliseconds(100))
        for tenth in 2...20 {
            rate.record(
                totalBytes: 1_000_000 + Int64(tenth - 1) * 5_000_000,
                at: self.start + .milliseconds(100 * tenth)
            )
        }
        #expect(rate.bytesPerSecond > 45_000_000, "\(rate.bytesPerSecond)")
    }

    @Test func aTransferReportsFractionAndTimeLeft() {
        let progress = TransferProgress(receivedBytes: 250, expectedBytes: 1000, bytesPerSecond: 250)
        #expect(progress.fractionCompleted == 0.25)
        #expect(progress.estimatedTimeRemaining == .seconds(3))
        #expect(TransferProgress(receivedBytes: 5, expectedBytes: nil, bytesPerSecond: 1).fractionCompleted == nil)
    }

    @Test func aTokenBucketSpacesOutUseToItsRate() {
        var bucket = TokenBucket(bytesPerSecond: 100_000, now: self.start)
        #expect(bucket.take(100_000, at: self.start) == .seconds(1))
        // A second later the debt is paid; using another 50,000 bytes at once costs half a second.
        #expect(bucket.take(50_000, at: self.start + .seconds(1)) == .milliseconds(500))
        // Idle time earns credit, but never more than the burst (here its floor, 65,536 bytes): of 80,000 bytes used
        // at once, 14,464 must wait 144.64 ms.
        #expect(bucket.take(40_000, at: self.start + .seconds(60)) == .zero)
        #expect(bucket.take(40_000, at: self.start + .seconds(60)) == .milliseconds(145))
    }

    @Test func aChangedRateAppliesFromThenOn() {
        var bucket = TokenBucket(bytesPerSecond: 1_000, now: self.start)
        bucket.setRate(1_000_000)
        #expect(bucket.take(500_000, at: self.start) == .milliseconds(500))
    }
}

/// How far one transfer has come.
public struct TransferProgress: Hashable, Sendable {
    /// Bytes of the file on disk so far (including bytes from before a resume); for an upload, bytes sent so far
    /// (the most any attempt sent: it never goes backwards).
    public var receivedBytes: Int64
    /// The file's size, once the server has said it (or the request gave it); `nil` while unknown.
    public var expectedBytes: Int64?
    /// A moving average of the receiving speed (time constant in ``RateEstimator``).
    public var bytesPerSecond: Double

    /// Creates a progress value.
    public init(receivedBytes: Int64, expectedBytes: Int64?, bytesPerSecond: Double) {
        self.receivedBytes = receivedBytes
        self.expectedBytes = expectedBytes
        self.bytesPerSecond = bytesPerSecond
    }

    /// `receivedBytes / expectedBytes` in 0...1, or `nil` while the size is unknown.
    public var fractionCompleted: Double? {
        guard let expected = self.expectedBytes else { return nil }
        guard expected > 0 else { return 1 }
        return min(1, Double(self.receivedBytes) / Double(expected))
    }

    /// The time left at the current speed, or `nil` when the size is unknown or nothing is moving.
    public var estimatedTimeRemaining: Duration? {
        guard let expected = self.expectedBytes else { return nil }
        return estimatedTime(remainingBytes: expected - self.receivedBytes, bytesPerSecond: self.bytesPerSecond)
    }
}

/// How far a batch has come, weighted by bytes as SDL-0029 asked: a 1 GiB file counts a thousand times a 1 MiB one.
public struct BatchProgress: Hashable, Sendable {
    /// Transfers in the batch.
    public var totalFiles: Int
    /// Transfers that completed.
    public var completedFiles: Int
    /// Transfers that failed.
    public var failedFiles: Int
    /// Transfers that were cancelled.
    public var cancelledFiles: Int
    /// Transfers that were skipped.
    public var skippedFiles: Int
    /// Bytes received over the batch. It never decreases: a file restarting from zero only counts again once it
    /// passes its earlier mark.
    public var transferredBytes: Int64
    /// The sum of the file sizes, or `nil` while some file's size is unknown (see ``knownExpectedBytes``).
    public var expectedBytes: Int64?
    /// The sum of the sizes known so far.
    public var knownExpectedBytes: Int64
    /// Files whose size is not known yet.
    public var filesOfUnknownSize: Int
    /// The byte-weighted fraction done, in 0...1, never decreasing; files of unknown size weigh the average known
    /// size until their size is known. Exactly 1 when every file has finished.
    public var fractionCompleted: Double
    /// A moving average of the batch's receiving speed.
    public var bytesPerSecond: Double
    /// The time left at the current speed, or `nil` when nothing is moving.
    public var estimatedTimeRemaining: Duration?

    /// Creates a progress value (for tests and adapters; the manager makes its own).
    public init(
        totalFiles: Int,
        completedFiles: Int,
        failedFiles: Int,
        cancelledFiles: Int,
        skippedFiles: Int,
        transferredBytes: Int64,
        expectedBytes: Int64?,
        knownExpectedBytes: Int64,
        filesOfUnknownSize: Int,
        fractionCompleted: Double,
        bytesPerSecond: Double,
        estimatedTimeRemaining: Duration?
    ) {
        self.totalFiles = totalFiles
        self.completedFiles = completedFiles
        self.failedFiles = failedFiles
        self.cancelledFiles = cancelledFiles
        self.skippedFiles = skippedFiles
        self.transferredBytes = transferredBytes
        self.expectedBytes = expectedBytes
        self.knownExpectedBytes = knownExpectedBytes
        self.filesOfUnknownSize = filesOfUnknownSize
        self.fractionCompleted = fractionCompleted
        self.bytesPerSecond = bytesPerSecond
        self.estimatedTimeRemaining = estimatedTimeRemaining
    }

    /// Transfers that have not finished yet.
    public var remainingFiles: Int {
        self.totalFiles - self.completedFiles - self.failedFiles - self.cancelledFiles - self.skippedFiles
    }

    /// Whether every transfer has finished.
    public var isFinished: Bool { self.remainingFiles == 0 }
}

func estimatedTime(remainingBytes: Int64, bytesPerSecond: Double) -> Duration? {
    guard remainingBytes > 0 else { return .zero }
    guard bytesPerSecond >= 1 else { return nil }
    return .milliseconds(Int64((Double(remainingBytes) / bytesPerSecond * 1000).rounded(.up)))
}

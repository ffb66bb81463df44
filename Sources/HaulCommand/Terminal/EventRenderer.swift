import Foundation
import Haul

/// Turns batch events into output lines: plain text for people and logs, or NDJSON for programs. Pure: it keeps
/// only what it needs to decide when the next plain progress line is due.
struct EventRenderer {
    enum Mode: Equatable {
        /// One line per started, completed or failed item, and a progress line at most every `progressEvery`.
        case plain(progressEvery: Duration)
        /// One JSON object per line with an `event` field.
        case json
        /// Only failures.
        case quiet

        /// The events the mode prints something for: a batch's stream carries only those.
        var selection: BatchEvent.Selection {
            switch self {
            case .plain: .lifecycle
            case .json: .all
            case .quiet: .failures
            }
        }
    }

    let mode: Mode
    private var lastProgressLine: ContinuousClock.Instant?

    init(mode: Mode) { self.mode = mode }

    /// The lines for an event, at `now`.
    mutating func lines(for event: BatchEvent, at now: ContinuousClock.Instant) -> [String] {
        switch self.mode {
        case .json:
            return JSONEvent.make(event).map { [$0.encoded()] } ?? []
        case .quiet:
            if case .transfer(let transfer) = event, case .finished(let result) = transfer.kind, result.state == .failed
            {
                let line = Self.resultLine(transfer, result)
                return ["\(line.word) \(line.detail)"]
            }
            return []
        case .plain(let every):
            switch event {
            case .transfer(let transfer):
                switch transfer.kind {
                case .started(let offset):
                    return [
                        "started   \(transfer.url.absoluteString)"
                            + (offset > 0 ? " (resuming at \(Formatting.bytes(offset)))" : "")
                    ]
                case .restarted(let reason):
                    return ["restarted \(transfer.url.absoluteString): \(reason)"]
                case .retrying(let attempt, let delay, let error):
                    return [Self.retryLine(transfer.url, attempt: attempt, delay: delay, error: error)]
                case .finished(let result):
                    let line = Self.resultLine(transfer, result)
                    return ["\(line.word) \(line.detail)"]
                case .queued, .progressed, .paused, .resumed:
                    return []
                }
            case .progressed(let progress):
                if let last = self.lastProgressLine, now - last < every { return [] }
                if progress.isFinished { return [] }
                self.lastProgressLine = now
                return [Self.progressLine(progress)]
            case .finished:
                return []
            }
        }
    }

    /// How a transfer ended, as a fixed-width word and the rest of the line: the same words in plain output,
    /// with `--quiet`, and above the live display.
    static func resultLine(_ transfer: TransferEvent, _ result: TransferResult) -> (word: String, detail: String) {
        switch result {
        case .completed(let file): ("completed", "\(file.filePath) (\(Formatting.bytes(file.byteCount)))")
        case .failed(let error): ("failed   ", "\(transfer.url.absoluteString): \(error.message)")
        case .skipped(let existing): ("skipped  ", "\(transfer.url.absoluteString): \(existing.path) exists")
        case .cancelled: ("cancelled", transfer.url.absoluteString)
        }
    }

    /// `retrying  URL in 2.0s (attempt 1 failed: ...)`.
    static func retryLine(_ url: URL, attempt: Int, delay: Duration, error: HaulError) -> String {
        "retrying  \(url.absoluteString) in \(Formatting.duration(delay)) (attempt \(attempt) failed: \(error.message))"
    }

    /// `progress  12/200 files, 3 failed, 45.2 MiB of 120 MiB (37%), 80.1 MiB/s, 1.0s left`.
    static func progressLine(_ progress: BatchProgress) -> String {
        let done = progress.completedFiles + progress.skippedFiles
        var text = "progress  \(done)/\(progress.totalFiles) files"
        if progress.failedFiles > 0 { text += ", \(progress.failedFiles) failed" }
        text += ", \(Formatting.bytes(progress.transferredBytes))"
        if let expected = progress.expectedBytes { text += " of \(Formatting.bytes(expected))" }
        text += " (\(Int(progress.fractionCompleted * 100))%)"
        // No speed yet (the first tenth of a second): none printed, rather than 0 B/s.
        if progress.bytesPerSecond > 0 { text += ", \(Formatting.speed(progress.bytesPerSecond))" }
        if let left = progress.estimatedTimeRemaining { text += ", \(Formatting.duration(left)) left" }
        return text
    }
}

/// The summary printed at the end of every run: counts, bytes, time, speed, then one line per failed item.
enum Summary {
    /// Prints the summary: on standard output, or on standard error with `--json` (standard output is for events);
    /// with `--quiet`, only the failure lines.
    /// `transferredBytes`: how many of the completed files' bytes this run moved (``TransferredBytes``).
    static func print(_ report: BatchReport, elapsed: Duration, transferredBytes: Int64, json: Bool, quiet: Bool) {
        // Quiet, the totals line is not even made: its number formatting's first use costs more than the rest of a
        // one-file run's rendering.
        let lines =
            quiet
            ? self.failureLines(for: report)
            : self.lines(for: report, elapsed: elapsed, transferredBytes: transferredBytes)
        for line in lines {
            if json { Get.printError(line) } else { Get.printOutput(line) }
        }
    }

    /// The totals line (the completed files' bytes, how many of them earlier runs fetched, and the speed of what this
    /// run transferred), then the failures.
    static func lines(for report: BatchReport, elapsed: Duration, transferredBytes: Int64) -> [String] {
        let tally = report.tally
        let bytes = tally.completedBytes
        let transferred = min(max(transferredBytes, 0), bytes)
        let seconds = max(Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18, 1e-6)
        var counts = ["\(tally.completed) completed"]
        if tally.skipped > 0 { counts.append("\(tally.skipped) skipped") }
        counts.append("\(tally.failed) failed")
        if tally.cancelled > 0 { counts.append("\(tally.cancelled) cancelled") }
        var totals =
            "\(Formatting.count(report.items.count, "file")): \(counts.joined(separator: ", ")); \(Formatting.bytes(bytes))"
        let earlier = bytes - transferred
        if earlier > 0 && transferred == 0 {
            // Nothing moved: no speed to give.
            totals += " (all of it from earlier runs) in \(Formatting.duration(elapsed))"
        } else {
            if earlier > 0 { totals += " (\(Formatting.bytes(earlier)) of it from earlier runs)" }
            totals += " in \(Formatting.duration(elapsed)) (\(Formatting.speed(Double(transferred) / seconds)))"
        }
        return [totals] + self.failureLines(for: report)
    }

    /// What an interrupted run (Ctrl-C, SIGTERM) left, and how to go on: its unfinished items are reported as
    /// cancelled, but with the state database their partial files and records are kept for the next run, which
    /// continues them (and reads the rest of a list the interruption cut short). `nil` when nothing was left.
    static func interruptionLine(for report: BatchReport, keepsState: Bool) -> String? {
        let unfinished = report.tally.cancelled
        guard unfinished > 0 else { return nil }
        let left = "haul: interrupted with \(Formatting.count(unfinished, "file")) unfinished"
        return keepsState
            ? left + "; run the same command again to continue (the partial files and the state are kept)"
            : left + " (not kept: --no-state)"
    }

    /// A line for each failed item, in the report's order.
    static func failureLines(for report: BatchReport) -> [String] {
        report.items.compactMap { item in
            guard case .failed(let error) = item.result else { return nil }
            let status = error.httpStatus.map { " [HTTP \($0)]" } ?? ""
            return "FAILED \(item.url.absoluteString): \(error.message)\(status)"
        }
    }
}

/// One NDJSON event of `haul get --json`.
struct JSONEvent: Encodable {
    struct ErrorBody: Encodable {
        var code: String
        var message: String
        var status: Int?
    }

    var event: String
    var id: String?
    var url: String?
    var offset: Int64?
    var bytes: Int64?
    var total: Int64?
    var bytesPerSecond: Double?
    var path: String?
    var sha256: String?
    var reason: String?
    var attempt: Int?
    /// Seconds before the next attempt.
    var delay: Double?
    var error: ErrorBody?
    var files: Int?
    var completed: Int?
    var failed: Int?
    var skipped: Int?
    var cancelled: Int?

    init(event: String, id: TransferID? = nil, url: URL? = nil) {
        self.event = event
        self.id = id?.rawValue
        self.url = url?.absoluteString
    }

    static func make(_ event: BatchEvent) -> JSONEvent? {
        switch event {
        case .transfer(let transfer):
            var json = JSONEvent(event: "", id: transfer.id, url: transfer.url)
            switch transfer.kind {
            case .queued: json.event = "queued"
            case .started(let offset):
                json.event = "started"
                json.offset = offset
            case .progressed(let progress):
                json.event = "progress"
                json.bytes = progress.receivedBytes
                json.total = progress.expectedBytes
                json.bytesPerSecond = (progress.bytesPerSecond * 10).rounded() / 10
            case .paused: json.event = "paused"
            case .resumed: json.event = "resumed"
            case .restarted(let reason):
                json.event = "restarted"
                json.reason = reason
            case .retrying(let attempt, let delay, let error):
                json.event = "retrying"
                json.attempt = attempt
                json.delay = delay.secondsValue
                json.reason = error.message
                json.error = ErrorBody(code: error.code.description, message: error.message, status: error.httpStatus)
            case .finished(.completed(let file)):
                json.event = "completed"
                json.path = file.path.path
                json.bytes = file.byteCount
                json.sha256 = file.sha256
            case .finished(.failed(let error)):
                json.event = "failed"
                json.error = ErrorBody(code: error.code.description, message: error.message, status: error.httpStatus)
            case .finished(.skipped(let existing)):
                json.event = "skipped"
                json.path = existing.path
            case .finished(.cancelled):
                json.event = "cancelled"
            }
            return json
        case .progressed:
            return nil
        case .finished(let report):
            var json = JSONEvent(event: "finished")
            let tally = report.tally
            json.files = report.items.count
            json.completed = tally.completed
            json.failed = tally.failed
            json.skipped = tally.skipped
            json.cancelled = tally.cancelled
            json.bytes = tally.completedBytes
            return json
        }
    }

    func encoded() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data("{}".utf8), as: UTF8.self)
    }
}

extension Duration {
    /// The duration in seconds.
    var secondsValue: Double {
        Double(self.components.seconds) + Double(self.components.attoseconds) / 1e18
    }
}

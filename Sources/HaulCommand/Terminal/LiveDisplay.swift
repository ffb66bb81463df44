import CHaulSystem
import Foundation
import Haul

/// The live display on a terminal: transfer lines and a total line redrawn in place a few times a second, with
/// finished files printed above them as permanent lines. It owns no clock and no terminal: it turns events into the
/// text (with escape codes) to write, so that it can be tested as a function.
struct LiveDisplay {
    /// How often the block is redrawn, at most.
    static let redrawInterval: Duration = .milliseconds(200)

    var renderer: ProgressRenderer
    private var active: [TransferID: ProgressRenderer.Active] = [:]
    private var order: [TransferID] = []
    private var total: BatchProgress?
    private var drawnLines = 0
    private var lastDraw: ContinuousClock.Instant?
    private let started: ContinuousClock.Instant

    init(renderer: ProgressRenderer, started: ContinuousClock.Instant) {
        self.renderer = renderer
        self.started = started
    }

    /// The text to write for an event at `now` (possibly empty).
    mutating func output(for event: BatchEvent, at now: ContinuousClock.Instant) -> String {
        var permanent: [String] = []
        var force = false
        switch event {
        case .transfer(let transfer):
            switch transfer.kind {
            case .started:
                if self.active[transfer.id] == nil { self.order.append(transfer.id) }
                let name =
                    transfer.url.lastPathComponent.isEmpty
                    ? transfer.url.absoluteString : transfer.url.lastPathComponent
                self.active[transfer.id] = .init(
                    name: name,
                    progress: TransferProgress(receivedBytes: 0, expectedBytes: nil, bytesPerSecond: 0)
                )
            case .progressed(let progress):
                self.active[transfer.id]?.progress = progress
            case .finished(let result):
                self.active[transfer.id] = nil
                self.order.removeAll { $0 == transfer.id }
                permanent.append(self.permanentLine(transfer, result))
                force = true
            case .retrying(let attempt, let delay, let error):
                permanent.append(EventRenderer.retryLine(transfer.url, attempt: attempt, delay: delay, error: error))
            case .paused:
                self.active[transfer.id] = nil
                self.order.removeAll { $0 == transfer.id }
            case .queued, .resumed, .restarted:
                break
            }
        case .progressed(let progress):
            // A file ended: show its count at once, not a redraw interval later.
            force = self.total.map { Self.finishedCount($0) != Self.finishedCount(progress) } ?? true
            self.total = progress
        case .finished:
            return self.clear()
        }
        let due = force || self.lastDraw.map { now - $0 >= Self.redrawInterval } ?? true
        guard due || !permanent.isEmpty else { return "" }
        var text = self.clear()
        // Permanent lines are printed once, above the block, and may wrap: they are never redrawn.
        for line in permanent { text += line + "\n" }
        text += self.draw(at: now)
        return text
    }

    /// Erases the block drawn last, leaving the cursor where it started.
    mutating func clear() -> String {
        defer { self.drawnLines = 0 }
        return String(repeating: "\u{1B}[1A\u{1B}[2K", count: self.drawnLines) + "\r"
    }

    private mutating func draw(at now: ContinuousClock.Instant) -> String {
        guard let total = self.total else { return "" }
        self.lastDraw = now
        let snapshot = ProgressRenderer.Snapshot(
            active: self.order.compactMap { self.active[$0] },
            total: total,
            elapsed: now - self.started
        )
        let lines = self.renderer.lines(for: snapshot)
        self.drawnLines = lines.count
        return lines.map { $0 + "\n" }.joined()
    }

    private static func finishedCount(_ progress: BatchProgress) -> Int {
        progress.completedFiles + progress.failedFiles + progress.cancelledFiles + progress.skippedFiles
    }

    private func permanentLine(_ transfer: TransferEvent, _ result: TransferResult) -> String {
        let (word, detail) = EventRenderer.resultLine(transfer, result)
        let color =
            switch result.state {
            case .completed: "32"
            case .failed: "31"
            default: "33"
            }
        return self.renderer.colors ? "\u{1B}[\(color)m\(word)\u{1B}[0m \(detail)" : "\(word) \(detail)"
    }
}

/// What the terminal on standard output is, if it is one.
enum TerminalInfo {
    /// Its width, or `nil` when standard output is not a terminal.
    static func width() -> Int? { Self.size()?.width }

    /// The terminal's width in columns and its height in rows (`nil` when it does not say), when standard output is
    /// one with a width.
    static func size() -> (width: Int, height: Int?)? {
        var columns: Int32 = 0
        var rows: Int32 = 0
        guard haul_terminal_size(STDOUT_FILENO, &columns, &rows) == 0, columns > 0 else { return nil }
        return (Int(columns), rows > 0 ? Int(rows) : nil)
    }

    /// Whether colours may be used: on a terminal, and `NO_COLOR` unset or empty (https://no-color.org).
    static func allowsColor(environment: [String: String]) -> Bool {
        (environment["NO_COLOR"] ?? "").isEmpty && environment["TERM"] != "dumb"
    }
}

import Foundation
import Haul

/// Prints a batch's events the way the mode and the terminal ask: a live display on a terminal, plain lines in
/// pipes and logs, NDJSON with `--json`, failures only with `--quiet`.
enum EventPrinter {
    /// The events ``print(_:mode:)`` shows something for, so that a batch's stream carries only those: the live
    /// display on a terminal draws each file's progress; plain lines in a pipe or a log need no file's progress (on
    /// 2,000 small files, those events were half of what the stream carried).
    static func selection(for mode: EventRenderer.Mode) -> BatchEvent.Selection {
        if case .plain = mode, TerminalInfo.width() != nil { return .all }
        return mode.selection
    }

    /// Prints the events until the batch ends.
    /// - Returns: the bytes of completed files this run transferred (``TransferredBytes``), as far as the mode's
    ///   events tell (not at all with `--quiet`, whose summary has no totals).
    @discardableResult
    static func print(_ events: AsyncStream<BatchEvent>, mode: EventRenderer.Mode) async -> Int64 {
        var transferred = TransferredBytes()
        if case .plain = mode, let (width, height) = TerminalInfo.size() {
            let colors = TerminalInfo.allowsColor(environment: ProcessInfo.processInfo.environment)
            let renderer = ProgressRenderer(
                width: width,
                maximumTransferLines: ProgressRenderer.transferLines(forRows: height),
                colors: colors
            )
            var display = LiveDisplay(renderer: renderer, started: .now)
            for await event in events {
                transferred.note(event)
                let text = display.output(for: event, at: .now)
                if !text.isEmpty { FileHandle.standardOutput.write(Data(text.utf8)) }
            }
            return transferred.total
        }
        var renderer = EventRenderer(mode: mode)
        for await event in events {
            transferred.note(event)
            for line in renderer.lines(for: event, at: .now) { Get.printOutput(line) }
        }
        return transferred.total
    }
}

/// How many of the completed files' bytes this run transferred: each completed transfer's size less what was on
/// disk when this run first started it (a partial file an earlier run left, continued with a `Range` request). A
/// file that completed without starting in this run (an earlier run's, found unchanged) moved nothing. Later starts
/// (after a retry or a pause) continue bytes this run fetched; a restart from zero kept none of the earlier ones. The
/// summary's speed is over these bytes (a resumed 1 GiB file of which 400 MiB were there is 624 MiB transferred, as
/// curl and wget count it), and it names the rest as the earlier runs'.
struct TransferredBytes {
    private var offsets: [TransferID: Int64] = [:]
    /// What completed transfers moved in this run.
    private(set) var total: Int64 = 0

    mutating func note(_ event: BatchEvent) {
        guard case .transfer(let transfer) = event else { return }
        switch transfer.kind {
        case .started(let offset):
            if self.offsets[transfer.id] == nil { self.offsets[transfer.id] = offset }
        case .restarted:
            self.offsets[transfer.id] = 0
        case .finished(let result):
            let offset = self.offsets.removeValue(forKey: transfer.id)
            if case .completed(let file) = result, let offset { self.total += max(0, file.byteCount - offset) }
        case .queued, .progressed, .paused, .resumed, .retrying:
            break
        }
    }
}

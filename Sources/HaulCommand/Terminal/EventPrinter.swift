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

    static func print(_ events: AsyncStream<BatchEvent>, mode: EventRenderer.Mode) async {
        if case .plain = mode, let width = TerminalInfo.width() {
            let colors = TerminalInfo.allowsColor(environment: ProcessInfo.processInfo.environment)
            var display = LiveDisplay(renderer: ProgressRenderer(width: width, colors: colors), started: .now)
            for await event in events {
                let text = display.output(for: event, at: .now)
                if !text.isEmpty { FileHandle.standardOutput.write(Data(text.utf8)) }
            }
            return
        }
        var renderer = EventRenderer(mode: mode)
        for await event in events {
            for line in renderer.lines(for: event, at: .now) { Get.printOutput(line) }
        }
    }
}

import './base.css';
import './cells.css';
import './timeline.css';
import './classroom.css';
